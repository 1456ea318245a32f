//! `polling`: what waiting costs in store requests, per waiter and minute.
//!
//! On S3 and DynamoDB every read is a billed request, and nothing pushes a change: waiters poll
//! (`baton_client::poll`). This holds a key through the library with a lease longer than the
//! run, queues `--waiters` waiters behind it one after the other (so their places are 0, 1, 2,
//! …), each with its own store connection counted by a [`CountingStore`], lets them wait for
//! `--duration`, and reports each waiter's requests per minute next to the documented bound on
//! its reads ([`PollBounds::reads_per_minute_at_most`]). Then the holder releases and the
//! waiters take their turns and release, so the key is left empty.
//!
//! On a store that pushes, the same run shows the timer-only reads (one per longest interval).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::poll::PollBounds;
use baton_client::Coordinator;
use baton_core::Outcome;
use serde::Serialize;

use crate::counting::{CountingStore, Counts};
use crate::setup::{describe_load, fresh_key, load_average_1m, Workdir};
use crate::Common;

/// How long a waiter may take to show up in the queue.
const QUEUE_WAIT: Duration = Duration::from_secs(30);

/// One waiter's requests over the measured time.
#[derive(Debug, Serialize)]
pub struct WaiterReport {
    /// Its place in the queue (0: next in line).
    pub position: usize,
    /// Store calls while it waited.
    pub counts: Counts,
    /// Document reads per minute.
    pub reads_per_minute: f64,
    /// Writes (CAS: its waiter-lease refreshes, or expiries it carried out) per minute.
    pub writes_per_minute: f64,
    /// `Store::clock` calls per minute. None is a request of its own: DynamoDB has no clock,
    /// and the other stores estimate theirs from the replies they already got.
    pub clock_reads_per_minute: f64,
    /// The documented bound on its reads per minute.
    pub reads_per_minute_bound: u64,
}

/// The results of `polling`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// Whether the store pushes changes (then waiters read by timer only at the longest
    /// interval).
    pub pushes: bool,
    /// The poll bounds the waiters used.
    pub poll_min_ms: u64,
    /// The longest interval.
    pub poll_max_ms: u64,
    /// How long the waiters were measured.
    pub measured_s: f64,
    /// Each waiter, by place.
    pub waiters: Vec<WaiterReport>,
}

/// Runs the measurement.
pub async fn run(common: &Common, waiters: usize, duration: Duration) -> Result<Report> {
    if waiters == 0 {
        bail!("--waiters must be at least 1");
    }
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    let open = || async { crate::setup::open_store(&workdir.store_url).await };
    let key = fresh_key("polling");
    let holder = Coordinator::new(open().await?);
    let pushes = holder.store().capabilities().watch;
    let holding = AcquireOptions {
        // Longer than the run, so the holder needs no renewal and nobody takes over.
        ttl: duration + Duration::from_secs(120),
        timeout: Some(Duration::from_secs(60)),
        context: "baton-bench polling: the holder".to_owned(),
        ..AcquireOptions::default()
    };
    let lease = acquire(&holder, &Pending::new(&key), &holding)
        .await
        .with_context(|| format!("cannot acquire {key}"))?;

    let bounds = PollBounds::default();
    let mut counters = Vec::with_capacity(waiters);
    let mut tasks = Vec::with_capacity(waiters);
    for place in 0..waiters {
        let counting = Arc::new(CountingStore::new(open().await?));
        let coord = Coordinator::new(counting.clone());
        let pending = Pending::new(&key);
        let id = pending.id.clone();
        let options = AcquireOptions {
            poll: bounds,
            timeout: Some(duration * 2 + Duration::from_secs(120)),
            context: format!("baton-bench polling: waiter {place}"),
            ..AcquireOptions::default()
        };
        let task_key = key.clone();
        tasks.push(tokio::spawn(async move {
            let lease = acquire(&coord, &pending, &options).await?;
            release(&coord, &task_key, &lease.token, Outcome::Succeeded).await
        }));
        wait_queued(&holder, &key, &id, place).await?;
        counters.push(counting);
    }

    for counting in &counters {
        counting.reset();
    }
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    let measured = started.elapsed();
    let per_minute = |n: u64| n as f64 * 60.0 / measured.as_secs_f64();
    let reports = counters
        .iter()
        .enumerate()
        .map(|(position, counting)| {
            let counts = counting.counts();
            WaiterReport {
                position,
                reads_per_minute: per_minute(counts.load),
                writes_per_minute: per_minute(counts.cas),
                clock_reads_per_minute: per_minute(counts.clock),
                reads_per_minute_bound: bounds.reads_per_minute_at_most(position),
                counts,
            }
        })
        .collect();

    release(&holder, &key, &lease.token, Outcome::Succeeded)
        .await
        .with_context(|| format!("cannot release {key}"))?;
    for (place, task) in tasks.into_iter().enumerate() {
        task.await
            .with_context(|| format!("waiter {place} panicked"))?
            .with_context(|| format!("waiter {place} failed"))?;
    }
    Ok(Report {
        load_average_1m,
        store: workdir.store_url.clone(),
        pushes,
        poll_min_ms: bounds.min.as_millis() as u64,
        poll_max_ms: bounds.max.as_millis() as u64,
        measured_s: measured.as_secs_f64(),
        waiters: reports,
    })
}

/// Waits until ticket `id` is queued at `place` on `key`.
async fn wait_queued(coord: &Coordinator, key: &str, id: &str, place: usize) -> Result<()> {
    let deadline = Instant::now() + QUEUE_WAIT;
    loop {
        let snapshot = coord.read(key).await?;
        let position = snapshot
            .doc
            .as_ref()
            .and_then(|doc| baton_core::apply::status_of(doc, id))
            .map(|status| status.position);
        match position {
            Some(position) if position == place => return Ok(()),
            Some(position) => bail!("waiter {place} was queued at place {position}"),
            None if Instant::now() > deadline => {
                bail!("waiter {place} was not queued within {QUEUE_WAIT:?}")
            }
            None => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Prints the report as a table.
pub fn print(report: &Report, out: &mut String) {
    outln!(
        out,
        "polling: requests per waiter and minute, {} waiters behind a holder for {:.0} s \
         (--poll {}ms..{}ms)",
        report.waiters.len(),
        report.measured_s,
        report.poll_min_ms,
        report.poll_max_ms
    );
    outln!(
        out,
        "store: {}{}",
        report.store,
        if report.pushes {
            " (pushes changes: waiters read by timer only at the longest interval)"
        } else {
            " (no push: waiters poll)"
        }
    );
    outln!(
        out,
        "load average (1 min): {}",
        describe_load(report.load_average_1m)
    );
    outln!(
        out,
        "{:>6} {:>10} {:>10} {:>10} {:>12}",
        "place",
        "reads/min",
        "writes/min",
        "clock/min",
        "reads bound"
    );
    for waiter in &report.waiters {
        outln!(
            out,
            "{:>6} {:>10.1} {:>10.1} {:>10.1} {:>12}",
            waiter.position,
            waiter.reads_per_minute,
            waiter.writes_per_minute,
            waiter.clock_reads_per_minute,
            waiter.reads_per_minute_bound
        );
    }
}
