//! `throughput`: acquire + release cycles through the library.
//!
//! Alone: one client in this process, one key nobody else uses, so every cycle is the warm
//! uncontended path; a [`CountingStore`] between the coordinator and the store says how many
//! round trips a cycle cost (the design promises one per operation, so two per cycle).
//!
//! With `--processes N`: N copies of this harness (the hidden `worker` subcommand) cycle on
//! one key for a fixed time. Each records, per grant, its fence and when it held (from just
//! after `acquire` returned to just before `release` was called, a window inside the real
//! hold), and writes them to a file. The harness merges them and checks what mutual exclusion
//! means: no fence handed out twice, and, in fence order, no hold starting before the previous
//! one ended.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use baton_client::acquire::{acquire, release, AcquireOptions, Pending};
use baton_client::Coordinator;
use baton_core::Outcome;
use serde::{Deserialize, Serialize};
use tokio::process::Command;

use crate::counting::{CountingStore, Counts};
use crate::peers::contenders::Locker;
use crate::peers::replay;
use crate::setup::{describe_load, fresh_key, load_average_1m, own_path, realtime_ns, Workdir};
use crate::stats::Summary;
use crate::Common;

/// How long the workers get to start and open the store before the common start.
const WORKER_START_GRACE: Duration = Duration::from_secs(2);

/// Overlaps and duplicates listed in a report, at most.
const MAX_LISTED: usize = 20;

/// The results of `throughput` with one uncontended client.
#[derive(Debug, Serialize)]
pub struct SingleReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// Measured cycles.
    pub cycles: usize,
    /// Unmeasured cycles before them.
    pub warmup: usize,
    /// The cycles were baton's two writes replayed through the store (`--replay`), not the
    /// library's acquire + release.
    pub replayed: bool,
    /// Wall time of the measured cycles.
    pub elapsed_s: f64,
    /// Cycles per second.
    pub cycles_per_s: f64,
    /// Latency of one acquire + release.
    pub cycle_ms: Summary,
    /// Store calls over the measured cycles.
    pub counts: Counts,
    /// Loads and CASes per cycle.
    pub round_trips_per_cycle: f64,
}

/// Runs one uncontended client; with `replay`, baton's writes replayed through the store
/// instead ([`replay`], the floor of `peers`' B1 rows), so that the client's own cost shows
/// as the difference between the two runs, under `perf stat` too.
pub async fn single(
    common: &Common,
    cycles: usize,
    warmup: usize,
    replay: bool,
) -> Result<SingleReport> {
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    let store = crate::setup::open_store(&workdir.store_url).await?;
    let counting = Arc::new(CountingStore::new(store));
    let mut client = if replay {
        replay::locker(workdir.store_url.clone(), counting.clone())
    } else {
        Box::new(Library::new(counting.clone()))
    };
    let key = fresh_key("throughput");
    let mut latencies = Vec::with_capacity(cycles);
    let mut measured_from = Instant::now();
    for cycle in 0..warmup + cycles {
        if cycle == warmup {
            counting.reset();
            measured_from = Instant::now();
        }
        let started = Instant::now();
        client
            .lock(&key)
            .await
            .with_context(|| format!("cycle {cycle}: cannot acquire {key}"))?;
        client
            .unlock(&key)
            .await
            .with_context(|| format!("cycle {cycle}: cannot release {key}"))?;
        if cycle >= warmup {
            latencies.push(started.elapsed());
        }
    }
    let elapsed_s = measured_from.elapsed().as_secs_f64();
    let counts = counting.counts();
    Ok(SingleReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        cycles,
        warmup,
        replayed: replay,
        elapsed_s,
        cycles_per_s: cycles as f64 / elapsed_s,
        cycle_ms: Summary::of(&latencies).context("no cycles were measured")?,
        round_trips_per_cycle: counts.round_trips() as f64 / cycles as f64,
        counts,
    })
}

/// The library's acquire + release on a warm coordinator, nothing around them: no heartbeat,
/// no guard.
struct Library {
    coord: Coordinator,
    options: AcquireOptions,
    token: Option<String>,
}

impl Library {
    fn new(store: Arc<CountingStore>) -> Library {
        Library {
            coord: Coordinator::new(store),
            options: cycle_options("baton-bench throughput"),
            token: None,
        }
    }
}

#[async_trait]
impl Locker for Library {
    async fn lock(&mut self, key: &str) -> Result<()> {
        let lease = acquire(&self.coord, &Pending::new(key), &self.options).await?;
        self.token = Some(lease.token);
        Ok(())
    }

    async fn unlock(&mut self, key: &str) -> Result<()> {
        let token = self.token.take().context("not held")?;
        release(&self.coord, key, &token, Outcome::Succeeded).await?;
        Ok(())
    }

    /// Not counted here: the store under the coordinator counts them.
    fn requests(&self) -> u64 {
        0
    }
}

/// Options for a cycle: a normal ticket on a mutex, with a timeout so a benchmark that goes
/// wrong fails instead of waiting for ever.
fn cycle_options(context: &str) -> AcquireOptions {
    AcquireOptions {
        timeout: Some(Duration::from_secs(60)),
        context: context.to_string(),
        ..AcquireOptions::default()
    }
}

/// Prints the report as a table.
pub fn print_single(report: &SingleReport, out: &mut String) {
    outln!(
        out,
        "throughput: one client, uncontended {}, {} cycles after {} warm-up",
        if report.replayed {
            "acquire + release replayed (baton's two writes through the store alone)"
        } else {
            "acquire + release"
        },
        report.cycles,
        report.warmup
    );
    outln!(out, "store:      {}", report.store);
    outln!(
        out,
        "load:       {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    outln!(out);
    let s = &report.cycle_ms;
    outln!(
        out,
        "{:>12} {:>10} {:>10} {:>10} {:>10}",
        "cycles/s",
        "p50 (µs)",
        "p90 (µs)",
        "p99 (µs)",
        "max (µs)"
    );
    outln!(
        out,
        "{:>12.0} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
        report.cycles_per_s,
        s.p50_ms * 1e3,
        s.p90_ms * 1e3,
        s.p99_ms * 1e3,
        s.max_ms * 1e3
    );
    outln!(out);
    print_counts(&report.counts, report.cycles as f64, "cycle", out);
}

/// Store calls per unit (cycle, grant).
fn print_counts(counts: &Counts, units: f64, unit: &str, out: &mut String) {
    let per = |n: u64| n as f64 / units;
    outln!(
        out,
        "store round trips per {unit}: {:.2} ({:.2} load + {:.2} cas, of which {:.2} conflicts)",
        per(counts.round_trips()),
        per(counts.load),
        per(counts.cas),
        per(counts.cas_conflicts)
    );
    outln!(
        out,
        "other store calls per {unit}: {:.2} clock, {:.2} watch, {:.2} history/list",
        per(counts.clock),
        per(counts.watch),
        per(counts.other)
    );
}

/// Arguments of the hidden `worker` subcommand.
#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// Store URL.
    #[arg(long)]
    store: String,
    /// The key every worker cycles on.
    #[arg(long)]
    key: String,
    /// CLOCK_REALTIME ns at which to start cycling.
    #[arg(long)]
    start_at_ns: u128,
    /// CLOCK_REALTIME ns after which to start no new cycle.
    #[arg(long)]
    stop_at_ns: u128,
    /// Where to write the results (JSON).
    #[arg(long)]
    out: PathBuf,
}

/// What a worker writes.
#[derive(Debug, Serialize, Deserialize)]
struct WorkerOutput {
    /// One per grant.
    grants: Vec<Grant>,
    /// Store calls over the measured cycles.
    counts: Counts,
    /// How many acquires or releases failed.
    n_failures: usize,
    /// The first few failures, in words.
    failures: Vec<String>,
}

/// One grant, as a worker saw it. Times are CLOCK_REALTIME ns.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Grant {
    fence: u64,
    /// When `acquire` was called.
    asked_ns: u128,
    /// When `acquire` returned the lease.
    held_ns: u128,
    /// When `release` was called.
    released_ns: u128,
}

/// One worker process: cycles on the key from `start_at_ns` to `stop_at_ns`.
pub async fn worker(args: WorkerArgs) -> Result<()> {
    let store = crate::setup::open_store(&args.store).await?;
    let counting = Arc::new(CountingStore::new(store));
    let coord = Coordinator::new(counting.clone());
    let options = cycle_options(&format!("baton-bench worker pid {}", std::process::id()));
    let wait_ns = args.start_at_ns.saturating_sub(realtime_ns());
    tokio::time::sleep(Duration::from_nanos(
        u64::try_from(wait_ns).context("a start more than 500 years away")?,
    ))
    .await;
    let mut grants = Vec::new();
    // A failed operation is a finding (contention the coordinator gave up on, say), not the
    // end of the run: it is counted and reported, and the worker goes on cycling.
    let mut n_failures = 0;
    let mut failures = Vec::new();
    let mut failed = |what: &str, error: baton_client::ClientError| {
        n_failures += 1;
        if failures.len() < MAX_LISTED {
            failures.push(format!("{what}: {error}"));
        }
    };
    while realtime_ns() < args.stop_at_ns {
        let pending = Pending::new(&args.key);
        let asked_ns = realtime_ns();
        let lease = match acquire(&coord, &pending, &options).await {
            Ok(lease) => lease,
            Err(error) => {
                failed("acquire", error);
                continue;
            }
        };
        let held_ns = realtime_ns();
        let released_ns = realtime_ns();
        // Granted whatever the release does: its fence counts in the checks.
        grants.push(Grant {
            fence: lease.fence,
            asked_ns,
            held_ns,
            released_ns,
        });
        if let Err(error) = release(&coord, &args.key, &lease.token, Outcome::Succeeded).await {
            failed("release", error);
        }
    }
    let output = WorkerOutput {
        grants,
        counts: counting.counts(),
        n_failures,
        failures,
    };
    let json = serde_json::to_vec(&output).context("cannot encode the results")?;
    std::fs::write(&args.out, json).with_context(|| format!("cannot write {}", args.out.display()))
}

/// The results of `throughput --processes N`.
#[derive(Debug, Serialize)]
pub struct ManyReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// Worker processes.
    pub processes: u32,
    /// How long they cycled.
    pub duration_s: f64,
    /// Grants over all processes.
    pub total_grants: usize,
    /// Grants per second over all processes (from the common start to the last release).
    pub grants_per_s: f64,
    /// Grants per process.
    pub per_process: Vec<usize>,
    /// From calling `acquire` to holding, over all grants.
    pub wait_ms: Summary,
    /// Store calls of all processes.
    pub counts: Counts,
    /// Loads and CASes per grant, all processes together.
    pub round_trips_per_grant: f64,
    /// Acquires and releases that failed, over all processes.
    pub n_failures: usize,
    /// The first few failures, by process.
    pub failures: Vec<String>,
    /// Fences handed out more than once (must be empty).
    pub duplicate_fences: Vec<u64>,
    /// Pairs of fences whose holds overlapped in time (must be empty), at most 20.
    pub overlaps: Vec<(u64, u64)>,
}

/// Runs `processes` workers on one key for `duration`.
pub async fn many(common: &Common, processes: u32, duration: Duration) -> Result<ManyReport> {
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    workdir.require_shared_store("`throughput --processes`")?;
    // Opened (and so created) once here, so the workers do not all race to create the file.
    crate::setup::open_store(&workdir.store_url).await?;
    let harness = own_path()?;
    let key = fresh_key("contended");
    let start_at_ns = realtime_ns() + WORKER_START_GRACE.as_nanos();
    let stop_at_ns = start_at_ns + duration.as_nanos();
    let mut children = Vec::new();
    for n in 0..processes {
        let out = workdir.path(&format!("worker-{n}.json"));
        let child = Command::new(&harness)
            .arg("worker")
            .args(["--store", &workdir.store_url, "--key", &key])
            .args(["--start-at-ns", &start_at_ns.to_string()])
            .args(["--stop-at-ns", &stop_at_ns.to_string()])
            .arg("--out")
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start worker {n} ({})", harness.display()))?;
        children.push((out, child));
    }
    let mut outputs = Vec::new();
    for (n, (out, child)) in children.into_iter().enumerate() {
        let finished = child
            .wait_with_output()
            .await
            .with_context(|| format!("lost track of worker {n}"))?;
        if !finished.status.success() {
            bail!(
                "worker {n} failed ({}): {}",
                finished.status,
                String::from_utf8_lossy(&finished.stderr).trim()
            );
        }
        let bytes = std::fs::read(&out)
            .with_context(|| format!("cannot read worker {n}'s results {}", out.display()))?;
        let output: WorkerOutput = serde_json::from_slice(&bytes)
            .with_context(|| format!("worker {n}'s results {} are not valid", out.display()))?;
        outputs.push(output);
    }

    let per_process: Vec<usize> = outputs.iter().map(|o| o.grants.len()).collect();
    let n_failures = outputs.iter().map(|o| o.n_failures).sum();
    let failures: Vec<String> = outputs
        .iter()
        .enumerate()
        .flat_map(|(n, o)| o.failures.iter().map(move |f| format!("worker {n}: {f}")))
        .take(MAX_LISTED)
        .collect();
    let counts = outputs
        .iter()
        .fold(Counts::default(), |sum, o| sum.add(&o.counts));
    let mut grants: Vec<Grant> = outputs.into_iter().flat_map(|o| o.grants).collect();
    grants.sort_by_key(|g| g.fence);
    let duplicate_fences: Vec<u64> = grants
        .windows(2)
        .filter(|w| w[0].fence == w[1].fence)
        .map(|w| w[0].fence)
        .take(MAX_LISTED)
        .collect();
    let overlaps: Vec<(u64, u64)> = grants
        .windows(2)
        .filter(|w| w[1].held_ns < w[0].released_ns)
        .map(|w| (w[0].fence, w[1].fence))
        .take(MAX_LISTED)
        .collect();
    let last_release_ns = grants.iter().map(|g| g.released_ns).max();
    let span_s = match last_release_ns {
        Some(last) => last.saturating_sub(start_at_ns) as f64 / 1e9,
        None => duration.as_secs_f64(),
    };
    let waits: Vec<Duration> = grants
        .iter()
        .map(|g| {
            Duration::from_nanos(
                u64::try_from(g.held_ns.saturating_sub(g.asked_ns)).unwrap_or(u64::MAX),
            )
        })
        .collect();
    let total_grants = grants.len();
    Ok(ManyReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        processes,
        duration_s: duration.as_secs_f64(),
        total_grants,
        grants_per_s: total_grants as f64 / span_s,
        per_process,
        wait_ms: Summary::of(&waits).context("no process was granted the key even once")?,
        round_trips_per_grant: counts.round_trips() as f64 / total_grants as f64,
        counts,
        n_failures,
        failures,
        duplicate_fences,
        overlaps,
    })
}

/// Prints the report as a table.
pub fn print_many(report: &ManyReport, out: &mut String) {
    outln!(
        out,
        "throughput: {} processes cycling acquire + release on one key for {:.0} s",
        report.processes,
        report.duration_s
    );
    outln!(out, "store:      {}", report.store);
    outln!(
        out,
        "load:       {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    outln!(out);
    outln!(
        out,
        "{:>10} {:>10} {:>14} {:>14} {:>14}",
        "grants",
        "grants/s",
        "wait p50 (ms)",
        "wait p99 (ms)",
        "wait max (ms)"
    );
    outln!(
        out,
        "{:>10} {:>10.0} {:>14.2} {:>14.2} {:>14.2}",
        report.total_grants,
        report.grants_per_s,
        report.wait_ms.p50_ms,
        report.wait_ms.p99_ms,
        report.wait_ms.max_ms
    );
    outln!(out);
    let counts: Vec<String> = report.per_process.iter().map(|n| n.to_string()).collect();
    let fewest = report.per_process.iter().min().unwrap_or(&0);
    let most = report.per_process.iter().max().unwrap_or(&0);
    outln!(
        out,
        "grants per process: {} (fewest {fewest}, most {most})",
        counts.join(" ")
    );
    print_counts(&report.counts, report.total_grants as f64, "grant", out);
    outln!(out);
    if report.n_failures == 0 {
        outln!(out, "failed operations: none");
    } else {
        outln!(out, "failed operations: {}, the first:", report.n_failures);
        for failure in &report.failures {
            outln!(out, "  {failure}");
        }
    }
    if report.duplicate_fences.is_empty() {
        outln!(out, "fences: all {} distinct", report.total_grants);
    } else {
        outln!(out, "fences: DUPLICATED: {:?}", report.duplicate_fences);
    }
    if report.overlaps.is_empty() {
        outln!(out, "holds in fence order: none overlaps the next");
    } else {
        outln!(
            out,
            "holds in fence order: OVERLAPPING: {:?}",
            report.overlaps
        );
    }
}
