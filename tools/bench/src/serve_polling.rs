//! `serve-polling`: what N waiters on one key cost the store, waiting directly next to waiting
//! through `baton serve`.
//!
//! Directly, every waiter reads the key on its own timer (on S3 and DynamoDB, billed requests).
//! Through a server, the server follows the key once, however many wait, and pushes each
//! change to every waiter (`baton_server::feeds`); the waiters' own writes (their waiter-lease
//! refreshes) cost the same either way. Both runs queue `--waiters` waiters behind a holder
//! that holds for longer than the run, count every store call for `--duration`, then release
//! so that every waiter takes its turn (which checks that the waits work).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::remote::RemoteStore;
use baton_client::Coordinator;
use baton_core::Outcome;
use baton_store::Store;
use serde::Serialize;

use crate::counting::{CountingStore, Counts};
use crate::setup::{describe_load, fresh_key, load_average_1m, Workdir};
use crate::Common;

/// One way of waiting, measured.
#[derive(Debug, Serialize)]
pub struct Way {
    /// `direct` or `through baton serve`.
    pub how: String,
    /// Every store call of every waiter (directly), or of the server (through it).
    pub counts: Counts,
    /// Document reads per minute, all waiters together.
    pub reads_per_minute: f64,
    /// Writes per minute (the waiters' refreshes).
    pub writes_per_minute: f64,
    /// Clock reads per minute: not requests on most stores (PostgreSQL, Redis and S3 estimate
    /// the time from the replies they already got; SQLite reads the host's clock).
    pub clock_per_minute: f64,
    /// Store requests per minute: reads, writes, history and lists.
    pub requests_per_minute: f64,
}

/// The results of `serve-polling`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// Waiters on the key.
    pub waiters: usize,
    /// How long each way was measured.
    pub measured_s: f64,
    /// Direct, then through the server.
    pub ways: Vec<Way>,
    /// Store requests through the server over store requests directly.
    pub ratio: f64,
}

/// Runs both ways, one after the other.
pub async fn run(
    common: &Common,
    waiters: usize,
    duration: Duration,
    poll: Duration,
) -> Result<Report> {
    if waiters == 0 {
        bail!("--waiters must be at least 1");
    }
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    let open = || async { crate::setup::open_store(&workdir.store_url).await };
    // Directly: each waiter with its own store connection, counted.
    let mut direct = Vec::new();
    for _ in 0..waiters {
        direct.push(Arc::new(CountingStore::new(open().await?)));
    }
    let coords = direct
        .iter()
        .map(|c| Coordinator::new(c.clone() as Arc<dyn Store>))
        .collect();
    let direct_way = measure("direct", open().await?, coords, &direct, duration).await?;

    // Through a server: the server's store connection, counted; the waiters reach it over
    // HTTP on loopback.
    let counting = Arc::new(CountingStore::new(open().await?));
    let options = baton_server::Options {
        listen: "127.0.0.1:0".parse().context("an address")?,
        tokens: None,
        insecure: false,
        allow_hosts: Vec::new(),
        poll,
        tls: None,
        metrics_public: false,
        trust: None,
        turn_wait: Duration::from_secs(50),
    };
    let state = baton_server::prepare(&options, counting.clone() as Arc<dyn Store>)
        .context("cannot prepare")?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        baton_server::serve(&options, state, |address, _| {
            let _ = tx.send(address);
        })
        .await
    });
    let address = rx.await.context("the server did not start")?;
    let mut coords = Vec::new();
    for _ in 0..waiters {
        let remote = RemoteStore::open(&format!("http://{address}"), None).await?;
        coords.push(Coordinator::through_server(Arc::new(remote)));
    }
    let through = measure(
        "through baton serve",
        open().await?,
        coords,
        std::slice::from_ref(&counting),
        duration,
    )
    .await?;
    server.abort();
    let ratio = through.requests_per_minute / direct_way.requests_per_minute.max(f64::MIN_POSITIVE);
    Ok(Report {
        load_average_1m,
        store: workdir.store_url.clone(),
        waiters,
        measured_s: duration.as_secs_f64(),
        ways: vec![direct_way, through],
        ratio,
    })
}

/// Queues one waiter per coordinator behind a holder on a fresh key, counts the calls of
/// `counted` for `duration`, then lets every waiter take its turn.
async fn measure(
    how: &str,
    holder_store: Arc<dyn Store>,
    coords: Vec<Coordinator>,
    counted: &[Arc<CountingStore>],
    duration: Duration,
) -> Result<Way> {
    let key = fresh_key("serve-polling");
    let holder = Coordinator::new(holder_store);
    let holding = AcquireOptions {
        ttl: duration + Duration::from_secs(120),
        timeout: Some(Duration::from_secs(60)),
        context: "baton-bench serve-polling: the holder".to_owned(),
        ..AcquireOptions::default()
    };
    let lease = acquire(&holder, &Pending::new(&key), &holding)
        .await
        .with_context(|| format!("cannot acquire {key}"))?;
    let mut tasks = Vec::new();
    let n = coords.len();
    for (place, coord) in coords.into_iter().enumerate() {
        let pending = Pending::new(&key);
        let options = AcquireOptions {
            timeout: Some(duration * 2 + Duration::from_secs(120)),
            context: format!("baton-bench serve-polling: waiter {place}"),
            ..AcquireOptions::default()
        };
        let task_key = key.clone();
        tasks.push(tokio::spawn(async move {
            let lease = acquire(&coord, &pending, &options).await?;
            release(&coord, &task_key, &lease.token, Outcome::Succeeded).await
        }));
    }
    wait_all_queued(&holder, &key, n).await?;
    // Settled: each waiter subscribed and made its first look.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for counting in counted {
        counting.reset();
    }
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    let measured = started.elapsed();
    let counts = counted
        .iter()
        .fold(Counts::default(), |sum, c| sum.add(&c.counts()));
    release(&holder, &key, &lease.token, Outcome::Succeeded)
        .await
        .with_context(|| format!("cannot release {key}"))?;
    for (place, task) in tasks.into_iter().enumerate() {
        task.await
            .with_context(|| format!("waiter {place} panicked"))?
            .with_context(|| format!("waiter {place} failed"))?;
    }
    let per_minute = |n: u64| n as f64 * 60.0 / measured.as_secs_f64();
    Ok(Way {
        how: how.to_owned(),
        reads_per_minute: per_minute(counts.load),
        writes_per_minute: per_minute(counts.cas),
        clock_per_minute: per_minute(counts.clock),
        requests_per_minute: per_minute(counts.load + counts.cas + counts.other),
        counts,
    })
}

/// Waits until `n` tickets are queued on `key`.
async fn wait_all_queued(coord: &Coordinator, key: &str, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let snapshot = coord.read(key).await?;
        let queued = snapshot.doc.as_ref().map_or(0, |doc| doc.queued().len());
        if queued == n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{queued} of {n} waiters were queued within a minute");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Prints the report as a table.
pub fn print(report: &Report, out: &mut String) {
    outln!(
        out,
        "serve-polling: store calls per minute for {} waiters on one key, {:.0} s each way",
        report.waiters,
        report.measured_s
    );
    outln!(out, "store: {}", report.store);
    outln!(
        out,
        "load average (1 min): {}",
        describe_load(report.load_average_1m)
    );
    outln!(
        out,
        "{:<22} {:>10} {:>10} {:>13} {:>10}",
        "",
        "reads/min",
        "writes/min",
        "requests/min",
        "clock/min"
    );
    for way in &report.ways {
        outln!(
            out,
            "{:<22} {:>10.1} {:>10.1} {:>13.1} {:>10.1}",
            way.how,
            way.reads_per_minute,
            way.writes_per_minute,
            way.requests_per_minute,
            way.clock_per_minute
        );
    }
    outln!(
        out,
        "store requests, through the server / direct: {:.3}",
        report.ratio
    );
}
