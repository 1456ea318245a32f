//! `baton serve` measured: `serve-overhead` (acquire + release through a server next to
//! direct, on the same store), `serve-handoff` (a release to a waiter's turn, both through one
//! server, next to both direct) and `serve-idle` (how many idle waiters one server holds, and
//! what they cost it in memory).
//!
//! The server is a `baton serve` process of its own (the `baton` binary next to this one, or
//! `--baton`), on loopback, in front of `--store`; it prints its address, which is read here.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::remote::RemoteStore;
use baton_client::Coordinator;
use baton_core::Outcome;
use serde::Serialize;

use crate::delay_proxy::{split_address, DelayProxy};
use crate::notify_kv::cycle;
use crate::setup::{baton_path, describe_load, fresh_key, load_average_1m, Workdir};
use crate::stats::Summary;
use crate::Common;

/// A `baton serve` process, killed when dropped.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Server {
    /// Starts `baton serve` on `store` with `extra` arguments.
    pub fn start(common: &Common, store: &str, extra: &[&str]) -> Result<Server> {
        let baton = baton_path(common)?;
        let mut child = Command::new(&baton)
            .args(["--store", store, "serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env_remove("BATON_TOKENS_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {} serve", baton.display()))?;
        let stderr = child.stderr.take().context("the server's stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let url = loop {
            let Some(line) = lines.next() else {
                bail!("baton serve exited before it listened");
            };
            let line = line?;
            if let Some((_, rest)) = line.split_once(" on http://") {
                let address = rest.split_whitespace().next().unwrap_or_default();
                break format!("http://{address}");
            }
        };
        // Keep reading its stderr, so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(Server { child, url })
    }

    /// Its resident memory, in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// Its open file descriptors.
    pub fn fds(&self) -> Option<usize> {
        Some(
            std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
                .ok()?
                .count(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn through(server: &Server) -> Result<Coordinator> {
    Ok(Coordinator::open(&server.url, None).await?)
}

/// The results of `serve-overhead`.
#[derive(Debug, Serialize)]
pub struct OverheadReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// The round trip added in front of the store (`--store-rtt`), for both ways.
    pub store_rtt_ms: Option<f64>,
    /// Measured cycles each way.
    pub rounds: usize,
    /// Acquire + release directly.
    pub direct_ms: Summary,
    /// Acquire + release through the server.
    pub through_server_ms: Summary,
    /// Through over direct, p50.
    pub ratio_p50: f64,
    /// `GET /healthz` through the same kind of client: the HTTP hop alone, with no store and
    /// no work behind it. An acquire + release is two such hops.
    pub empty_request_ms: Summary,
}

/// Runs `serve-overhead`: rounds alternate which way goes first.
pub async fn overhead(
    common: &Common,
    rounds: usize,
    warmup: usize,
    store_rtt: Option<Duration>,
) -> Result<OverheadReport> {
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    workdir.require_shared_store("serve-overhead")?;
    let store_url = match store_rtt {
        None => workdir.store_url.clone(),
        Some(rtt) => {
            let (before, address, after) = split_address(&workdir.store_url)?;
            let proxy = DelayProxy::start(address, rtt)?;
            format!("{before}{}{after}", proxy.address)
        }
    };
    let server = Server::start(common, &store_url, &[])?;
    let direct = Coordinator::open(&store_url, None).await?;
    let remote = through(&server).await?;
    let pinged = RemoteStore::open(&server.url, None).await?;
    let (key_direct, key_through) = (fresh_key("serve/direct"), fresh_key("serve/through"));
    let options = AcquireOptions {
        timeout: Some(Duration::from_secs(60)),
        context: "baton-bench serve-overhead".into(),
        ..AcquireOptions::default()
    };
    let (mut direct_times, mut through_times) = (Vec::new(), Vec::new());
    let mut empty_times = Vec::new();
    for round in 0..warmup + rounds {
        let started = Instant::now();
        pinged.ping().await?;
        if round >= warmup {
            empty_times.push(started.elapsed());
        }
        let first_direct = round % 2 == 0;
        for direct_now in [first_direct, !first_direct] {
            let (coord, key) = if direct_now {
                (&direct, &key_direct)
            } else {
                (&remote, &key_through)
            };
            let took = cycle(coord, key, &options).await?;
            if round >= warmup {
                if direct_now {
                    direct_times.push(took);
                } else {
                    through_times.push(took);
                }
            }
        }
    }
    let direct_ms = Summary::of(&direct_times).context("no rounds")?;
    let through_server_ms = Summary::of(&through_times).context("no rounds")?;
    Ok(OverheadReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        store_rtt_ms: store_rtt.map(|rtt| rtt.as_secs_f64() * 1000.0),
        rounds,
        ratio_p50: through_server_ms.p50_ms / direct_ms.p50_ms,
        direct_ms,
        through_server_ms,
        empty_request_ms: Summary::of(&empty_times).context("no rounds")?,
    })
}

/// The store a report ran on and the machine's load when it started.
fn print_store(out: &mut String, store: &str, load_average_1m: Option<f64>) {
    outln!(out, "store: {store}");
    outln!(
        out,
        "load average (1 min): {}",
        describe_load(load_average_1m)
    );
}

/// The header of a table of percentiles, the last column `last`.
fn print_columns(out: &mut String, last: &str) {
    outln!(out, "{:<22} {:>9} {:>9} {last:>9}", "", "p50 ms", "p90 ms");
}

pub fn print_overhead(r: &OverheadReport, out: &mut String) {
    outln!(
        out,
        "serve-overhead: acquire + release, {} rounds each way, alternating",
        r.rounds
    );
    print_store(out, &r.store, r.load_average_1m);
    if let Some(rtt) = r.store_rtt_ms {
        outln!(
            out,
            "store round trip added: {rtt} ms (direct and server alike)"
        );
    }
    print_columns(out, "p99 ms");
    for (name, s) in [
        ("direct", &r.direct_ms),
        ("through baton serve", &r.through_server_ms),
        ("GET /healthz alone", &r.empty_request_ms),
    ] {
        outln!(
            out,
            "{name:<22} {:>9.2} {:>9.2} {:>9.2}",
            s.p50_ms,
            s.p90_ms,
            s.p99_ms
        );
    }
    outln!(out, "ratio (p50, through / direct): {:.2}", r.ratio_p50);
}

/// The results of `serve-handoff`.
#[derive(Debug, Serialize)]
pub struct HandoffReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// Measured handoffs each way.
    pub rounds: usize,
    /// From the release's start to the waiter's acquire returning, both direct.
    pub direct_ms: Summary,
    /// The same, both through one server.
    pub through_server_ms: Summary,
}

/// Runs `serve-handoff`.
pub async fn handoff(common: &Common, rounds: usize, settle: Duration) -> Result<HandoffReport> {
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    workdir.require_shared_store("serve-handoff")?;
    let server = Server::start(common, &workdir.store_url, &[])?;
    let mut direct = Vec::new();
    let mut remote = Vec::new();
    for round in 0..rounds {
        for via_server in [round % 2 == 0, round % 2 != 0] {
            let (holder, waiter) = if via_server {
                (through(&server).await?, through(&server).await?)
            } else {
                (
                    Coordinator::open(&workdir.store_url, None).await?,
                    Coordinator::open(&workdir.store_url, None).await?,
                )
            };
            let took = one_handoff(holder, waiter, settle).await?;
            if via_server {
                remote.push(took);
            } else {
                direct.push(took);
            }
        }
    }
    Ok(HandoffReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        rounds,
        direct_ms: Summary::of(&direct).context("no rounds")?,
        through_server_ms: Summary::of(&remote).context("no rounds")?,
    })
}

/// A holder, a waiter queued behind it (given `settle` to be waiting), the release: the time
/// from the release's start to the waiter's acquire returning.
async fn one_handoff(
    holder: Coordinator,
    waiter: Coordinator,
    settle: Duration,
) -> Result<Duration> {
    let key = fresh_key("serve/handoff");
    let options = AcquireOptions {
        timeout: Some(Duration::from_secs(60)),
        context: "baton-bench serve-handoff".into(),
        ..AcquireOptions::default()
    };
    let held = acquire(&holder, &Pending::new(&key), &options).await?;
    let waiter = Arc::new(waiter);
    let task = {
        let (waiter, key, options) = (waiter.clone(), key.clone(), options.clone());
        tokio::spawn(async move {
            let lease = acquire(&waiter, &Pending::new(&key), &options).await?;
            let got = Instant::now();
            release(&waiter, &key, &lease.token, Outcome::Succeeded).await?;
            Ok::<Instant, baton_client::ClientError>(got)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while holder
        .read(&key)
        .await?
        .doc
        .is_none_or(|doc| doc.queued().is_empty())
    {
        if Instant::now() > deadline {
            bail!("the waiter never queued");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(settle).await;
    let released = Instant::now();
    release(&holder, &key, &held.token, Outcome::Succeeded).await?;
    let got = task.await.context("the waiter panicked")??;
    Ok(got.saturating_duration_since(released))
}

pub fn print_handoff(r: &HandoffReport, out: &mut String) {
    outln!(
        out,
        "serve-handoff: a release to the waiter's turn, {} rounds each way, alternating",
        r.rounds
    );
    print_store(out, &r.store, r.load_average_1m);
    print_columns(out, "max ms");
    for (name, s) in [
        ("direct", &r.direct_ms),
        ("through baton serve", &r.through_server_ms),
    ] {
        outln!(
            out,
            "{name:<22} {:>9.1} {:>9.1} {:>9.1}",
            s.p50_ms,
            s.p90_ms,
            s.max_ms
        );
    }
}

/// The results of `serve-idle`.
#[derive(Debug, Serialize)]
pub struct IdleReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// Waiters held.
    pub waiters: usize,
    /// Keys they wait on (a holder each).
    pub keys: usize,
    /// How long attaching them all took.
    pub attach_s: f64,
    /// The server's resident memory before the waiters came, KiB.
    pub rss_before_kib: u64,
    /// With every waiter attached and idle, KiB.
    pub rss_with_waiters_kib: u64,
    /// The server's memory per idle waiter, KiB.
    pub kib_per_waiter: f64,
    /// The server's open file descriptors with every waiter attached.
    pub fds: usize,
}

/// Runs `serve-idle`: `waiters` waiters over `keys` keys, each key held for the whole run.
pub async fn idle(
    common: &Common,
    waiters: usize,
    keys: usize,
    hold: Duration,
) -> Result<IdleReport> {
    if keys == 0 || waiters == 0 {
        bail!("--waiters and --keys must be at least 1");
    }
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    workdir.require_shared_store("serve-idle")?;
    let server = Server::start(common, &workdir.store_url, &[])?;
    let direct = Coordinator::open(&workdir.store_url, None).await?;
    let prefix = fresh_key("serve/idle");
    let names: Vec<String> = (0..keys).map(|k| format!("{prefix}/{k}")).collect();
    let holding = AcquireOptions {
        ttl: hold,
        timeout: Some(Duration::from_secs(60)),
        context: "baton-bench serve-idle: the holder".into(),
        ..AcquireOptions::default()
    };
    for name in &names {
        acquire(&direct, &Pending::new(name), &holding).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before_kib = server.rss_kib().context("the server's memory")?;
    // Library users with many waits share a connection pool: one per hundred waiters here;
    // every wait still has its own stream from the server.
    let mut pools = Vec::new();
    for _ in 0..waiters.div_ceil(100) {
        pools.push(Arc::new(RemoteStore::open(&server.url, None).await?));
    }
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(waiters);
    for w in 0..waiters {
        let coord = Coordinator::through_server(pools[w / 100].clone());
        let key = names[w % keys].clone();
        let options = AcquireOptions {
            // Idle: a waiter refreshes its place every third of its waiter lease.
            waiter_ttl: Duration::from_secs(600),
            timeout: Some(hold * 2),
            context: format!("baton-bench serve-idle: waiter {w}"),
            ..AcquireOptions::default()
        };
        tasks.push(tokio::spawn(async move {
            let _ = acquire(&coord, &Pending::new(&key), &options).await;
        }));
        if w % 200 == 199 {
            // Keep the queueing writes from piling up on the store all at once.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let mut queued = 0;
        for name in &names {
            queued += direct.read(name).await?.doc.map_or(0, |d| d.queued().len());
        }
        let watching = server.fds().unwrap_or(0);
        if queued >= waiters && watching >= waiters {
            break;
        }
        if Instant::now() > deadline {
            bail!("{queued} of {waiters} waiters queued, the server has {watching} descriptors");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let attach_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_with_waiters_kib = server.rss_kib().context("the server's memory")?;
    let fds = server.fds().unwrap_or(0);
    for task in &tasks {
        task.abort();
    }
    Ok(IdleReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        waiters,
        keys,
        attach_s,
        rss_before_kib,
        rss_with_waiters_kib,
        kib_per_waiter: rss_with_waiters_kib.saturating_sub(rss_before_kib) as f64 / waiters as f64,
        fds,
    })
}

pub fn print_idle(r: &IdleReport, out: &mut String) {
    outln!(
        out,
        "serve-idle: {} idle waiters over {} keys through one baton serve",
        r.waiters,
        r.keys
    );
    print_store(out, &r.store, r.load_average_1m);
    outln!(out, "attached in {:.1} s", r.attach_s);
    outln!(
        out,
        "server memory: {} KiB before, {} KiB with the waiters: {:.1} KiB per waiter",
        r.rss_before_kib,
        r.rss_with_waiters_kib,
        r.kib_per_waiter
    );
    outln!(out, "server file descriptors: {}", r.fds);
}
