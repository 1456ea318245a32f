//! `jobs-throughput`, `jobs-latency`, `jobs-idle`: job queues through the library's workers.
//!
//! Every worker here is what `baton worker` runs, without the child process: a loop of
//! [`jobs::claim_next`] over a prefix, [`jobs::Job::complete`] with success (a no-op job), and,
//! when nothing is ready, [`WorkWaker::wait`] (a push from the store where it has one, else
//! the poll interval), rested while it runs a job ([`WorkWaker::rest`], as `baton worker` rests
//! its waker while every slot is taken). Each worker has its own store connection and [`Coordinator`], as
//! separate processes would, so nothing is shared between them but the store; they run as
//! tasks of this process so that their instants can be compared on one monotonic clock.
//!
//! - `jobs-throughput`: jobs per second through W workers over K keys, each key strictly one
//!   run at a time (the default limit of 1). Each claim's fence and the window it held its key
//!   (from just after `claim_next` returned to just before `complete` was called, a window inside
//!   the real run) are recorded, and the run fails if two runs of one key overlap or a key's
//!   fences do not rise. A no-op job's window is microseconds wide, so only an overlap that
//!   close is seen; `--run-for` widens every window (and makes the job cost that long).
//! - `jobs-latency`: from just before a submit to an idle worker's `claim_next` returning that
//!   job: on a store that pushes, the push; elsewhere, the poll interval.
//! - `jobs-idle`: whether a worker's idle cost grows with keys that only *had* jobs: its store
//!   calls per minute, and a fresh job's claim latency, next to many done keys and a few with
//!   jobs queued for later. Two runs (`--idle-keys 0` and `--idle-keys 10000`) compare.
//!
//! Every run uses keys under a fresh prefix, so a run on a shared store never meets another's
//! jobs. Jobs left queued by `jobs-idle` (ready in an hour) stay there; on the default store
//! they go with its temporary file.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use baton_client::jobs::{self, ClaimOptions, KeyPatterns, SubmitOptions, WorkWaker};
use baton_client::Coordinator;
use baton_core::op::TicketView;
use baton_core::{JobResult, JobSpec, Outcome};
use serde::Serialize;
use tokio::sync::{mpsc, watch, Barrier};
use tokio::task::JoinHandle;

use crate::counting::{CountingStore, Counts};
use crate::setup::{describe_load, fresh_key, is_postgres, load_average_1m, open_store, Workdir};
use crate::stats::Summary;
use crate::Common;

/// The parameters of every job: the smallest valid JSON object (the job does nothing).
const PARAMS: &[u8] = b"{}";

/// How long an idle `jobs-throughput` worker waits for a push before it looks again: short,
/// since a worker that missed a job (another took the key it tried) should not sit out the
/// CLI's one-second default while others are still working through the queue.
const THROUGHPUT_POLL: Duration = Duration::from_millis(50);

/// Tasks that submit the jobs of `jobs-throughput` (not timed): enough to overlap the store's
/// round trips, few enough that they do not fight over keys (each has keys of its own).
const SUBMITTERS: usize = 8;

/// Tasks that give `jobs-idle`'s idle keys their history (submit, claim, complete each).
const PREPARERS: usize = 16;

/// A run of `jobs-throughput` without one completion for this long has stalled: the workers
/// are stopped and the run fails rather than wait for ever.
const STALL: Duration = Duration::from_secs(60);

/// How long after a submit the job may take to be claimed, on top of the poll interval,
/// before a latency round is given up.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);

/// Pause between latency rounds, so the worker is idle (waiting) when the next job arrives:
/// a random time in this range, so the rounds do not fall into step with the worker's poll.
const PAUSE_MIN: Duration = Duration::from_millis(50);
/// See [`PAUSE_MIN`].
const PAUSE_MAX: Duration = Duration::from_millis(150);

/// How long the jobs on `jobs-idle`'s queued keys wait before they are ready: longer than any
/// run, so they stay queued and the worker has nothing to claim.
const NOT_READY_FOR_MS: u64 = 3_600_000;

/// Overlaps and out-of-order fences listed in a report, at most.
const MAX_LISTED: usize = 20;

/// A fresh prefix (ending in `/`) for one run's keys.
fn fresh_prefix(what: &str) -> String {
    format!("{}/", fresh_key(what))
}

/// One library worker's own parts, as a separate process would have them: a store connection
/// counted by a [`CountingStore`], a coordinator over it, and its wake-up subscription.
struct Worker {
    coord: Arc<Coordinator>,
    counting: Arc<CountingStore>,
    patterns: KeyPatterns,
    waker: WorkWaker,
}

impl Worker {
    /// Opens a worker serving the keys under `prefix`.
    async fn open(url: &str, prefix: &str) -> Result<Worker> {
        let counting = Arc::new(CountingStore::new(open_store(url).await?));
        let coord = Arc::new(Coordinator::new(counting.clone()));
        let patterns = KeyPatterns::new(vec![prefix.to_owned()]);
        let waker = WorkWaker::new(&coord, &patterns)
            .await
            .with_context(|| format!("cannot subscribe to wake-ups for {prefix}"))?;
        Ok(Worker {
            coord,
            counting,
            patterns,
            waker,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// jobs-throughput

/// One claim, as a worker saw it.
#[derive(Clone, Debug)]
struct Run {
    key: String,
    id: String,
    fence: u64,
    /// Just after `claim_next` returned the job.
    claimed: Instant,
    /// Just before `complete` was called: up to here the worker surely held the key.
    completing: Instant,
    /// When `complete` returned the job finished; `None` if it did not.
    completed: Option<Instant>,
}

/// What one throughput worker did.
#[derive(Debug, Default)]
struct WorkerOutput {
    runs: Vec<Run>,
    counts: Counts,
    failures: Vec<String>,
    n_failures: usize,
}

/// What the throughput workers share: how many jobs are done, of how many, and whether to stop.
#[derive(Debug)]
struct Progress {
    total: usize,
    completed: AtomicUsize,
    stop: AtomicBool,
}

impl Progress {
    fn finished(&self) -> bool {
        self.completed.load(Ordering::Relaxed) >= self.total || self.stop.load(Ordering::Relaxed)
    }
}

/// Two runs of one key, by fence, that break strict per-key serialisation.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// The key.
    pub key: String,
    /// The fence of the run claimed first.
    pub earlier_fence: u64,
    /// The fence of the run claimed next.
    pub later_fence: u64,
}

/// The results of `jobs-throughput`.
#[derive(Debug, Serialize)]
pub struct ThroughputReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// Whether the workers are woken by the store's push (`WorkWaker::pushes`), else they poll.
    pub pushes: bool,
    /// Whether the database was vacuumed between the submission and the timed part
    /// (PostgreSQL only: [`crate::setup::vacuum`]).
    pub vacuumed: bool,
    /// Keys the jobs were spread over (round-robin).
    pub keys: usize,
    /// Jobs submitted.
    pub jobs: usize,
    /// Library workers, each with its own coordinator and store connection.
    pub workers: usize,
    /// How long each job ran (0: a no-op), in ms.
    pub run_for_ms: f64,
    /// Keys under another prefix, each with one job due before the measured ones, that no
    /// worker of the run serves ([`throughput`]'s `due_elsewhere`).
    pub due_elsewhere: usize,
    /// Of those jobs, how many were claimed and completed after the run (untimed) to take
    /// their keys out of the due index again.
    pub drained_elsewhere: usize,
    /// How long the (untimed) submission took.
    pub submit_s: f64,
    /// From the workers' start to the last job's completion.
    pub elapsed_s: f64,
    /// Jobs completed per second.
    pub jobs_per_s: f64,
    /// Jobs each worker completed.
    pub per_worker: Vec<usize>,
    /// Claims over all workers (more than `jobs` if a run had to be claimed again).
    pub claims: usize,
    /// Jobs claimed more than once (a completion that failed, then the lease ran out).
    pub jobs_claimed_again: usize,
    /// From claim to the call of `complete`, per run (the no-op job's cost, about nothing).
    pub run_ms: Summary,
    /// Store calls of all workers, from their start to their end.
    pub counts: Counts,
    /// Loads per job completed.
    pub loads_per_job: f64,
    /// CASes per job completed.
    pub cas_per_job: f64,
    /// Other calls (the due index, `list`) per job completed.
    pub other_per_job: f64,
    /// Claims and completions that failed, over all workers.
    pub n_failures: usize,
    /// The first few failures, by worker.
    pub failures: Vec<String>,
    /// Runs of one key that overlapped in time (must be none), at most 20.
    pub overlaps: Vec<Violation>,
    /// How many there were.
    pub n_overlaps: usize,
    /// Runs of one key whose fence did not rise over the run claimed before (must be none), at
    /// most 20.
    pub fences_not_rising: Vec<Violation>,
    /// How many there were.
    pub n_fences_not_rising: usize,
}

impl ThroughputReport {
    /// Whether every key ran its jobs strictly one at a time, in rising fences.
    pub fn serialised(&self) -> bool {
        self.n_overlaps == 0 && self.n_fences_not_rising == 0
    }
}

/// Runs `jobs-throughput`. With `due_elsewhere`, that many keys under a prefix of their own
/// first get one job each, due before the measured ones and served by no worker of the run (a
/// pool whose workers are down): every look at the due index meets them first. They are
/// claimed and completed after the run, whatever its result, so that they leave the due index
/// of a shared store.
pub async fn throughput(
    common: &Common,
    keys: usize,
    jobs: usize,
    workers: usize,
    run_for: Duration,
    vacuum: bool,
    due_elsewhere: usize,
) -> Result<ThroughputReport> {
    if keys == 0 || jobs == 0 || workers == 0 {
        bail!("--keys, --jobs and --workers must each be at least 1");
    }
    let per_key = jobs.div_ceil(keys);
    let max_live = baton_core::limits::LIVE_TICKETS_DEFAULT as usize;
    if per_key > max_live {
        bail!(
            "{jobs} jobs over {keys} keys is {per_key} jobs on a key; a key takes at most \
             {max_live} live jobs: use more keys"
        );
    }
    let workdir = Workdir::new(common)?;
    let submitter = Arc::new(Coordinator::new(open_store(&workdir.store_url).await?));
    let elsewhere = fresh_prefix("jobs-elsewhere");
    let elsewhere_keys: Arc<Vec<String>> = Arc::new(
        (0..due_elsewhere)
            .map(|k| format!("{elsewhere}k{k:05}"))
            .collect(),
    );
    submit_round_robin(&submitter, &elsewhere_keys, due_elsewhere).await?;
    let shape = (keys, jobs, workers);
    let measured = measure(&workdir, &submitter, shape, run_for, vacuum).await;
    let drained = drain(&workdir.store_url, &elsewhere, due_elsewhere).await;
    let mut report = measured?;
    report.due_elsewhere = due_elsewhere;
    report.drained_elsewhere = drained?;
    Ok(report)
}

/// Claims and completes the jobs under `prefix` until `expected` are done or none is left to
/// claim: how many were.
async fn drain(url: &str, prefix: &str, expected: usize) -> Result<usize> {
    if expected == 0 {
        return Ok(0);
    }
    let worker = Worker::open(url, prefix).await?;
    let options = ClaimOptions::default();
    let mut done = 0;
    while done < expected {
        let Some(job) = jobs::claim_next(&worker.coord, &worker.patterns, &options).await? else {
            break;
        };
        job.complete(JobResult::Succeeded)
            .await
            .with_context(|| format!("cannot complete a job under {prefix}"))?;
        done += 1;
    }
    Ok(done)
}

/// The measured part of `jobs-throughput`: `jobs` jobs over `keys` keys (`shape`, with the
/// workers), submitted, then run by the workers from a common start.
async fn measure(
    workdir: &Workdir,
    submitter: &Arc<Coordinator>,
    (keys, jobs, workers): (usize, usize, usize),
    run_for: Duration,
    vacuum: bool,
) -> Result<ThroughputReport> {
    let load_average_1m = load_average_1m();
    let prefix = fresh_prefix("jobs-throughput");
    let key_names: Arc<Vec<String>> =
        Arc::new((0..keys).map(|k| format!("{prefix}k{k:05}")).collect());

    let submit_started = Instant::now();
    submit_round_robin(submitter, &key_names, jobs).await?;
    let submit_s = submit_started.elapsed().as_secs_f64();
    let vacuumed = vacuum && is_postgres(&workdir.store_url);
    if vacuumed {
        crate::setup::vacuum(&workdir.store_url).await?;
    }

    // Opened and subscribed before the common start, as workers already running would be.
    let progress = Arc::new(Progress {
        total: jobs,
        completed: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    });
    let start = Arc::new(Barrier::new(workers + 1));
    let mut tasks = Vec::with_capacity(workers);
    let mut pushes = true;
    for n in 0..workers {
        let worker = Worker::open(&workdir.store_url, &prefix)
            .await
            .with_context(|| format!("cannot start worker {n}"))?;
        pushes &= worker.waker.pushes();
        worker.counting.reset();
        tasks.push(tokio::spawn(throughput_worker(
            worker,
            run_for,
            progress.clone(),
            start.clone(),
        )));
    }
    let started = Instant::now();
    start.wait().await;
    watch_progress(&progress).await;

    let mut outputs = Vec::with_capacity(workers);
    for (n, task) in tasks.into_iter().enumerate() {
        outputs.push(task.await.with_context(|| format!("worker {n} panicked"))?);
    }
    let completed = progress.completed.load(Ordering::Relaxed);
    if completed < jobs {
        bail!(
            "only {completed} of {jobs} jobs were completed: no job was for {STALL:?}, so the \
             workers were stopped"
        );
    }
    let per_worker: Vec<usize> = outputs
        .iter()
        .map(|o| o.runs.iter().filter(|r| r.completed.is_some()).count())
        .collect();
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
    let runs: Vec<Run> = outputs.into_iter().flat_map(|o| o.runs).collect();
    let last = runs
        .iter()
        .filter_map(|r| r.completed)
        .max()
        .context("no job was completed")?;
    let elapsed_s = last.saturating_duration_since(started).as_secs_f64();
    let run_times: Vec<Duration> = runs
        .iter()
        .map(|r| r.completing.saturating_duration_since(r.claimed))
        .collect();
    let (overlaps, fences_not_rising) = check_serialised(&runs);
    let mut claims_per_job: HashMap<(&str, &str), usize> = HashMap::new();
    for run in &runs {
        *claims_per_job.entry((&run.key, &run.id)).or_default() += 1;
    }
    let jobs_claimed_again = claims_per_job.values().filter(|&&n| n > 1).count();
    let per_job = |n: u64| n as f64 / completed as f64;
    Ok(ThroughputReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        pushes,
        vacuumed,
        keys,
        jobs,
        workers,
        run_for_ms: run_for.as_secs_f64() * 1e3,
        due_elsewhere: 0,
        drained_elsewhere: 0,
        submit_s,
        elapsed_s,
        jobs_per_s: completed as f64 / elapsed_s,
        per_worker,
        claims: runs.len(),
        jobs_claimed_again,
        run_ms: Summary::of(&run_times).context("no job was claimed")?,
        loads_per_job: per_job(counts.load),
        cas_per_job: per_job(counts.cas),
        other_per_job: per_job(counts.other),
        counts,
        n_failures,
        failures,
        n_overlaps: overlaps.len(),
        overlaps: overlaps.into_iter().take(MAX_LISTED).collect(),
        n_fences_not_rising: fences_not_rising.len(),
        fences_not_rising: fences_not_rising.into_iter().take(MAX_LISTED).collect(),
    })
}

/// Submits `jobs` jobs to `keys` round-robin (job i to key i mod K), with [`SUBMITTERS`] tasks
/// that each own every [`SUBMITTERS`]th key, so no two of them write one key.
async fn submit_round_robin(
    coord: &Arc<Coordinator>,
    keys: &Arc<Vec<String>>,
    jobs: usize,
) -> Result<()> {
    let mut tasks: Vec<JoinHandle<Result<()>>> = Vec::new();
    for first in 0..SUBMITTERS.min(keys.len()) {
        let (coord, keys) = (coord.clone(), keys.clone());
        tasks.push(tokio::spawn(async move {
            let options = SubmitOptions {
                context: "baton-bench jobs-throughput".into(),
                ..SubmitOptions::default()
            };
            for k in (first..keys.len()).step_by(SUBMITTERS) {
                for _ in (k..jobs).step_by(keys.len()) {
                    jobs::submit(&coord, &keys[k], PARAMS, &options)
                        .await
                        .with_context(|| format!("cannot submit a job to {}", keys[k]))?;
                }
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await.context("a submitting task panicked")??;
    }
    Ok(())
}

/// Waits until every job is done, or until none has been for [`STALL`] (then tells the
/// workers to stop).
async fn watch_progress(progress: &Progress) {
    let mut last = 0;
    let mut last_change = Instant::now();
    while progress.completed.load(Ordering::Relaxed) < progress.total {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = progress.completed.load(Ordering::Relaxed);
        if now != last {
            (last, last_change) = (now, Instant::now());
        } else if last_change.elapsed() > STALL {
            progress.stop.store(true, Ordering::Relaxed);
            return;
        }
    }
}

/// One throughput worker: claims and completes jobs from the common start until all are done.
/// A failed claim or completion is a finding, not the end of the run: it is counted and
/// reported, and the worker goes on.
async fn throughput_worker(
    mut worker: Worker,
    run_for: Duration,
    progress: Arc<Progress>,
    start: Arc<Barrier>,
) -> WorkerOutput {
    let options = ClaimOptions::default();
    let mut output = WorkerOutput::default();
    let failed = |output: &mut WorkerOutput, what: String| {
        output.n_failures += 1;
        if output.failures.len() < MAX_LISTED {
            output.failures.push(what);
        }
    };
    start.wait().await;
    while !progress.finished() {
        let job = match jobs::claim_next(&worker.coord, &worker.patterns, &options).await {
            Ok(Some(job)) => job,
            Ok(None) => {
                if !progress.finished() {
                    worker.waker.wait(THROUGHPUT_POLL).await;
                }
                continue;
            }
            Err(error) => {
                failed(&mut output, format!("claim_next: {error}"));
                worker.waker.wait(THROUGHPUT_POLL).await;
                continue;
            }
        };
        let claimed = Instant::now();
        // A worker of one slot, full now, as `baton worker` rests its waker.
        worker.waker.rest();
        let (key, id, fence) = (job.key().to_owned(), job.id().to_owned(), job.lease.fence);
        if !run_for.is_zero() {
            tokio::time::sleep(run_for).await;
        }
        let completing = Instant::now();
        let result = job.complete(JobResult::Succeeded).await;
        let completed = match result {
            Ok(TicketView::Finished {
                outcome: Outcome::Succeeded,
                ..
            }) => {
                let at = Instant::now();
                progress.completed.fetch_add(1, Ordering::Relaxed);
                Some(at)
            }
            Ok(other) => {
                failed(
                    &mut output,
                    format!("complete {id} on {key}: not finished: {other:?}"),
                );
                None
            }
            Err(error) => {
                failed(&mut output, format!("complete {id} on {key}: {error}"));
                None
            }
        };
        output.runs.push(Run {
            key,
            id,
            fence,
            claimed,
            completing,
            completed,
        });
    }
    output.counts = worker.counting.counts();
    output
}

/// Strict per-key serialisation, over every claim of every worker: on each key, in the order
/// of the claims, each run's window starts after the previous one's ended (overlaps), and its
/// fence is above the previous one's (fences not rising, which also catches a fence handed out
/// twice). Both windows are inside the real runs, so an overlap here is a real one.
fn check_serialised(runs: &[Run]) -> (Vec<Violation>, Vec<Violation>) {
    let mut by_key: HashMap<&str, Vec<&Run>> = HashMap::new();
    for run in runs {
        by_key.entry(run.key.as_str()).or_default().push(run);
    }
    let mut keys: Vec<&str> = by_key.keys().copied().collect();
    keys.sort_unstable();
    let (mut overlaps, mut not_rising) = (Vec::new(), Vec::new());
    for key in keys {
        let Some(runs) = by_key.get_mut(key) else {
            continue;
        };
        runs.sort_by_key(|r| (r.claimed, r.fence));
        for pair in runs.windows(2) {
            let (earlier, later) = (pair[0], pair[1]);
            let violation = || Violation {
                key: key.to_owned(),
                earlier_fence: earlier.fence,
                later_fence: later.fence,
            };
            if later.claimed < earlier.completing {
                overlaps.push(violation());
            }
            if later.fence <= earlier.fence {
                not_rising.push(violation());
            }
        }
    }
    (overlaps, not_rising)
}

/// Prints the report as a table.
pub fn print_throughput(report: &ThroughputReport, out: &mut String) {
    let job = if report.run_for_ms > 0.0 {
        format!("{:.0} ms", report.run_for_ms)
    } else {
        "no-op".to_owned()
    };
    outln!(
        out,
        "jobs-throughput: {} {job} jobs over {} keys (one run at a time per key), {} library \
         workers",
        report.jobs,
        report.keys,
        report.workers
    );
    outln!(
        out,
        "store:      {}{}",
        report.store,
        if report.pushes {
            " (pushes: idle workers wait for a push)"
        } else {
            " (no push: idle workers poll every 50 ms)"
        }
    );
    if report.vacuumed {
        outln!(
            out,
            "vacuumed:   the database, after the submission (--no-vacuum: not)"
        );
    }
    outln!(
        out,
        "load:       {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    if report.due_elsewhere > 0 {
        outln!(
            out,
            "elsewhere:  {} keys under another prefix, each with a job due before these, served \
             by no worker; {} drained after the run (not timed)",
            report.due_elsewhere,
            report.drained_elsewhere
        );
    }
    outln!(out, "submitted:  in {:.2} s (not timed)", report.submit_s);
    outln!(out);
    outln!(
        out,
        "{:>8} {:>10} {:>10} {:>12} {:>12} {:>12}",
        "jobs",
        "time (s)",
        "jobs/s",
        "loads/job",
        "cas/job",
        "other/job"
    );
    outln!(
        out,
        "{:>8} {:>10.2} {:>10.0} {:>12.2} {:>12.2} {:>12.2}",
        report.jobs,
        report.elapsed_s,
        report.jobs_per_s,
        report.loads_per_job,
        report.cas_per_job,
        report.other_per_job
    );
    outln!(out);
    let per_worker: Vec<String> = report.per_worker.iter().map(|n| n.to_string()).collect();
    outln!(out, "jobs per worker: {}", per_worker.join(" "));
    let c = &report.counts;
    outln!(
        out,
        "store calls of all workers: {} load, {} cas ({} conflicts), {} clock, {} watch, {} \
         other (due index, list)",
        c.load,
        c.cas,
        c.cas_conflicts,
        c.clock,
        c.watch,
        c.other
    );
    outln!(
        out,
        "claims: {} for {} jobs ({} claimed more than once); claim to complete: p50 {:.2} ms, \
         p99 {:.2} ms",
        report.claims,
        report.jobs,
        report.jobs_claimed_again,
        report.run_ms.p50_ms,
        report.run_ms.p99_ms
    );
    outln!(out);
    if report.n_failures == 0 {
        outln!(out, "failed operations: none");
    } else {
        outln!(out, "failed operations: {}, the first:", report.n_failures);
        for failure in &report.failures {
            outln!(out, "  {failure}");
        }
    }
    let list = |violations: &[Violation]| -> String {
        let pairs: Vec<String> = violations
            .iter()
            .map(|v| format!("{} {}→{}", v.key, v.earlier_fence, v.later_fence))
            .collect();
        pairs.join(", ")
    };
    if report.n_overlaps == 0 {
        outln!(out, "runs of one key: none overlaps the next");
    } else {
        outln!(
            out,
            "runs of one key: {} OVERLAPPING: {}",
            report.n_overlaps,
            list(&report.overlaps)
        );
    }
    if report.n_fences_not_rising == 0 {
        outln!(out, "fences of one key: rising, run after run");
    } else {
        outln!(
            out,
            "fences of one key: {} NOT RISING: {}",
            report.n_fences_not_rising,
            list(&report.fences_not_rising)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The idle worker of jobs-latency and jobs-idle

/// A job the idle worker claimed.
#[derive(Debug)]
struct Claimed {
    key: String,
    id: String,
    /// Just after `claim_next` returned it.
    at: Instant,
    /// Whether `complete` then finished it (and if not, why).
    completed: Result<(), String>,
}

/// A worker that waits for jobs under a prefix, claims and completes each, and tells what it
/// claimed and when. It stops at the first error: a latency measured around a failure would
/// mean nothing.
struct IdleWorker {
    task: JoinHandle<Result<()>>,
    claims: mpsc::UnboundedReceiver<Claimed>,
    stop: watch::Sender<bool>,
    counting: Arc<CountingStore>,
    /// Looks that found nothing (each one `claim_next`).
    idle_looks: Arc<AtomicU64>,
    /// Whether a push wakes it (`WorkWaker::pushes`), else it polls.
    pushes: bool,
}

impl IdleWorker {
    /// Starts a worker serving `prefix`, subscribed before this returns.
    async fn start(url: &str, prefix: &str, poll: Duration) -> Result<IdleWorker> {
        let worker = Worker::open(url, prefix).await?;
        let counting = worker.counting.clone();
        let pushes = worker.waker.pushes();
        let (claims_tx, claims) = mpsc::unbounded_channel();
        let (stop, stop_rx) = watch::channel(false);
        let idle_looks = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(idle_worker(
            worker,
            poll,
            claims_tx,
            stop_rx,
            idle_looks.clone(),
        ));
        Ok(IdleWorker {
            task,
            claims,
            stop,
            counting,
            idle_looks,
            pushes,
        })
    }

    /// The next job claimed, within `within`.
    async fn next_claim(&mut self, within: Duration) -> Result<Claimed> {
        match tokio::time::timeout(within, self.claims.recv()).await {
            Ok(Some(claimed)) => Ok(claimed),
            Ok(None) => bail!("the worker stopped before it claimed the job"),
            Err(_) => bail!("the worker did not claim the job within {within:?}"),
        }
    }

    /// Stops the worker, and returns its error if it failed.
    async fn stop(self) -> Result<()> {
        // Gone only if the worker ended already; its result says why.
        let _ = self.stop.send(true);
        self.task.await.context("the worker panicked")?
    }
}

async fn idle_worker(
    mut worker: Worker,
    poll: Duration,
    claims: mpsc::UnboundedSender<Claimed>,
    mut stop: watch::Receiver<bool>,
    idle_looks: Arc<AtomicU64>,
) -> Result<()> {
    let options = ClaimOptions::default();
    while !*stop.borrow() {
        let found = jobs::claim_next(&worker.coord, &worker.patterns, &options)
            .await
            .context("the worker cannot look for jobs")?;
        if let Some(job) = found {
            let at = Instant::now();
            let (key, id) = (job.key().to_owned(), job.id().to_owned());
            let completed = match job.complete(JobResult::Succeeded).await {
                Ok(TicketView::Finished {
                    outcome: Outcome::Succeeded,
                    ..
                }) => Ok(()),
                Ok(other) => Err(format!("not finished: {other:?}")),
                Err(error) => Err(error.to_string()),
            };
            let claimed = Claimed {
                key,
                id,
                at,
                completed,
            };
            if claims.send(claimed).is_err() {
                return Ok(()); // Nobody listens: the harness is gone.
            }
            continue; // Look again at once: there may be more.
        }
        idle_looks.fetch_add(1, Ordering::Relaxed);
        tokio::select! {
            () = worker.waker.wait(poll) => {}
            changed = stop.changed() => {
                if changed.is_err() {
                    return Ok(()); // The harness is gone.
                }
            }
        }
    }
    Ok(())
}

/// The measurement's result, unless the worker failed: then the worker's error, which says
/// why (the measurement's own only says that the worker stopped).
fn worker_first<T>(measured: Result<T>, worker: Result<()>) -> Result<T> {
    worker.context("the worker failed")?;
    measured
}

/// What [`measure_claims`] measured, one entry per measured round.
#[derive(Debug, Default)]
struct Claims {
    /// From just before the submit to the worker's `claim_next` returning the job.
    latencies: Vec<Duration>,
    /// The submit itself.
    submits: Vec<Duration>,
    /// Looks of the worker that found nothing and ended between just before the submit and
    /// the claim: with a latency near the poll interval, 0 says that nothing woke the worker
    /// for the job, 1 or more that something did (the push) but its look did not see the job
    /// as ready (the key due a little after the worker's reading of the store's clock, say).
    empty_looks: Vec<u64>,
}

/// Measures `rounds` claims (after `warmup` unmeasured ones) of single jobs submitted to
/// `keys(round)` by `coord` (from just before the submit to the worker's `claim_next` returning
/// the job). Each job is completed before the next submit, and a random pause lets the worker
/// fall idle.
async fn measure_claims(
    coord: &Coordinator,
    worker: &mut IdleWorker,
    keys: &dyn Fn(usize) -> String,
    warmup: usize,
    rounds: usize,
    poll: Duration,
) -> Result<Claims> {
    let options = SubmitOptions {
        context: "baton-bench jobs latency".into(),
        ..SubmitOptions::default()
    };
    let mut claims = Claims::default();
    for round in 0..warmup + rounds {
        tokio::time::sleep(random_between(PAUSE_MIN, PAUSE_MAX)).await;
        let key = keys(round);
        let looks_before = worker.idle_looks.load(Ordering::Relaxed);
        let before = Instant::now();
        let id = jobs::submit(coord, &key, PARAMS, &options)
            .await
            .with_context(|| format!("round {round}: cannot submit a job to {key}"))?
            .id;
        let submitted = before.elapsed();
        let claimed = worker
            .next_claim(poll * 3 + CLAIM_TIMEOUT)
            .await
            .with_context(|| format!("round {round}: job {id} on {key}"))?;
        if (claimed.key.as_str(), claimed.id.as_str()) != (key.as_str(), id.as_str()) {
            bail!(
                "round {round}: the worker claimed job {} on {} instead of {id} on {key}",
                claimed.id,
                claimed.key
            );
        }
        claimed
            .completed
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("round {round}: cannot complete job {id} on {key}"))?;
        let empty_looks = worker
            .idle_looks
            .load(Ordering::Relaxed)
            .saturating_sub(looks_before);
        if round >= warmup {
            claims
                .latencies
                .push(claimed.at.saturating_duration_since(before));
            claims.submits.push(submitted);
            claims.empty_looks.push(empty_looks);
        }
    }
    Ok(claims)
}

/// Rounds in which the worker looked and found nothing before it claimed the round's job.
fn rounds_with_empty_looks(empty_looks: &[u64]) -> usize {
    empty_looks.iter().filter(|&&n| n > 0).count()
}

/// A random duration in `[low, high)`. Not cryptographic, not needed to be: the standard
/// library's randomly keyed hasher, so the harness needs no random-number crate.
fn random_between(low: Duration, high: Duration) -> Duration {
    let bits = RandomState::new().hash_one(Instant::now());
    let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
    low + (high.saturating_sub(low)).mul_f64(unit)
}

// ---------------------------------------------------------------------------------------------
// jobs-latency

/// The results of `jobs-latency`.
#[derive(Debug, Serialize)]
pub struct LatencyReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// Whether the worker is woken by the store's push (`WorkWaker::pushes`), else it polls.
    pub pushes: bool,
    /// The idle worker's poll interval, in ms.
    pub poll_ms: f64,
    /// Measured rounds.
    pub rounds: usize,
    /// Unmeasured rounds before them.
    pub warmup: usize,
    /// Whether each round used a key no job had been on (else all used one key).
    pub new_key_each_round: bool,
    /// From just before the submit to the worker's `claim_next` returning the job.
    pub claim_ms: Summary,
    /// The submits themselves (their record and document writes), part of `claim_ms`.
    pub submit_ms: Summary,
    /// Every measured latency, in order.
    pub samples_ms: Vec<f64>,
    /// Per round, in order: the worker's looks that found nothing between the submit and the
    /// claim (see `rounds_with_empty_looks`).
    pub empty_looks: Vec<u64>,
    /// Rounds in which the worker looked after the submit, found nothing, and claimed the job
    /// only at a later look: woken (by the push or the poll) but the job not seen as ready.
    pub rounds_with_empty_looks: usize,
}

/// Runs `jobs-latency`.
pub async fn latency(
    common: &Common,
    rounds: usize,
    warmup: usize,
    poll: Duration,
    new_key_each_round: bool,
) -> Result<LatencyReport> {
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    let coord = Coordinator::new(open_store(&workdir.store_url).await?);
    let prefix = fresh_prefix("jobs-latency");
    let mut worker = IdleWorker::start(&workdir.store_url, &prefix, poll)
        .await
        .context("cannot start the worker")?;
    let pushes = worker.pushes;
    let keys = |round: usize| {
        if new_key_each_round {
            format!("{prefix}k{round:05}")
        } else {
            format!("{prefix}k")
        }
    };
    let measured = measure_claims(&coord, &mut worker, &keys, warmup, rounds, poll).await;
    let stopped = worker.stop().await;
    let claims = worker_first(measured, stopped)?;
    Ok(LatencyReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        pushes,
        poll_ms: poll.as_secs_f64() * 1e3,
        rounds,
        warmup,
        new_key_each_round,
        claim_ms: Summary::of(&claims.latencies).context("no claim was measured")?,
        submit_ms: Summary::of(&claims.submits).context("no submit was measured")?,
        samples_ms: claims
            .latencies
            .iter()
            .map(|d| d.as_secs_f64() * 1e3)
            .collect(),
        rounds_with_empty_looks: rounds_with_empty_looks(&claims.empty_looks),
        empty_looks: claims.empty_looks,
    })
}

/// Prints the report as a table.
pub fn print_latency(report: &LatencyReport, out: &mut String) {
    outln!(
        out,
        "jobs-latency: from just before a submit to an idle library worker's claim, {} rounds \
         after {} warm-up{}",
        report.rounds,
        report.warmup,
        if report.new_key_each_round {
            ", a new key each round"
        } else {
            ", one key"
        }
    );
    outln!(
        out,
        "store:      {}{}",
        report.store,
        if report.pushes {
            " (pushes: the worker is woken)"
        } else {
            " (no push: the worker polls)"
        }
    );
    outln!(out, "poll:       {:.0} ms", report.poll_ms);
    outln!(
        out,
        "load:       {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    outln!(out);
    print_summary_header(out);
    print_summary_row("submit → claim", &report.claim_ms, out);
    print_summary_row("submit alone", &report.submit_ms, out);
    outln!(out);
    print_empty_looks(report.rounds_with_empty_looks, report.rounds, out);
}

fn print_empty_looks(with_empty_looks: usize, rounds: usize, out: &mut String) {
    outln!(
        out,
        "rounds in which the worker looked after the submit, found nothing, and claimed the job \
         at a later look: {with_empty_looks} of {rounds}"
    );
}

pub(crate) fn print_summary_header(out: &mut String) {
    outln!(
        out,
        "{:<16} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "",
        "min (ms)",
        "p50 (ms)",
        "p90 (ms)",
        "p99 (ms)",
        "max (ms)"
    );
}

pub(crate) fn print_summary_row(what: &str, s: &Summary, out: &mut String) {
    outln!(
        out,
        "{:<16} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
        what,
        s.min_ms,
        s.p50_ms,
        s.p90_ms,
        s.p99_ms,
        s.max_ms
    );
}

// ---------------------------------------------------------------------------------------------
// jobs-idle

/// The results of `jobs-idle`.
#[derive(Debug, Serialize)]
pub struct IdleReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// Whether the worker is woken by the store's push (`WorkWaker::pushes`), else it polls.
    pub pushes: bool,
    /// Whether the store keeps a due index (then an idle worker reads only keys due by now).
    pub due_index: bool,
    /// The idle worker's poll interval, in ms.
    pub poll_ms: f64,
    /// Keys whose one job ran and ended.
    pub idle_keys: usize,
    /// Keys with a job queued, ready only in an hour.
    pub queued_keys: usize,
    /// How long preparing the keys took.
    pub prepare_s: f64,
    /// How long the idle worker was measured.
    pub measured_s: f64,
    /// Its store calls over that time.
    pub counts: Counts,
    /// Document reads per minute.
    pub loads_per_minute: f64,
    /// Other calls (the due index, `list`) per minute.
    pub other_per_minute: f64,
    /// CASes per minute.
    pub cas_per_minute: f64,
    /// `Store::clock` calls per minute.
    pub clock_per_minute: f64,
    /// Looks for work that found none, per minute (each one `claim_next`).
    pub looks_per_minute: f64,
    /// Then: a fresh job's claim latency on one more key (see `jobs-latency`).
    pub claim_ms: Summary,
    /// Of those rounds, how many the worker looked in after the submit, found nothing, and
    /// claimed the job only at a later look (see `jobs-latency`).
    pub rounds_with_empty_looks: usize,
}

/// Runs `jobs-idle`.
pub async fn idle(
    common: &Common,
    idle_keys: usize,
    queued_keys: usize,
    duration: Duration,
    poll: Duration,
    latency_rounds: usize,
) -> Result<IdleReport> {
    if latency_rounds == 0 {
        bail!("--latency-rounds must be at least 1");
    }
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    let coord = Arc::new(Coordinator::new(open_store(&workdir.store_url).await?));
    let capabilities = coord.store().capabilities();
    let prefix = fresh_prefix("jobs-idle");

    let prepare_started = Instant::now();
    prepare_idle_keys(&coord, &prefix, idle_keys).await?;
    let queued = SubmitOptions {
        context: "baton-bench jobs-idle: queued for later".into(),
        spec: JobSpec {
            delay_ms: NOT_READY_FOR_MS,
            ..JobSpec::default()
        },
        ..SubmitOptions::default()
    };
    for n in 0..queued_keys {
        let key = format!("{prefix}queued-{n:05}");
        jobs::submit(&coord, &key, PARAMS, &queued)
            .await
            .with_context(|| format!("cannot submit a job to {key}"))?;
    }
    let prepare_s = prepare_started.elapsed().as_secs_f64();

    let mut worker = IdleWorker::start(&workdir.store_url, &prefix, poll)
        .await
        .context("cannot start the worker")?;
    let pushes = worker.pushes;
    let key = format!("{prefix}latency");
    let keys = |_: usize| key.clone();
    let measured: Result<_> = async {
        let idle = measure_idle(&mut worker, duration).await?;
        let claims = measure_claims(&coord, &mut worker, &keys, 1, latency_rounds, poll).await?;
        Ok((idle, claims))
    }
    .await;
    let stopped = worker.stop().await;
    let (idle, claims) = worker_first(measured, stopped)?;
    let per_minute = |n: u64| n as f64 * 60.0 / idle.measured.as_secs_f64();
    let counts = idle.counts;
    Ok(IdleReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        pushes,
        due_index: capabilities.due_index,
        poll_ms: poll.as_secs_f64() * 1e3,
        idle_keys,
        queued_keys,
        prepare_s,
        measured_s: idle.measured.as_secs_f64(),
        loads_per_minute: per_minute(counts.load),
        other_per_minute: per_minute(counts.other),
        cas_per_minute: per_minute(counts.cas),
        clock_per_minute: per_minute(counts.clock),
        looks_per_minute: per_minute(idle.looks),
        counts,
        claim_ms: Summary::of(&claims.latencies).context("no claim was measured")?,
        rounds_with_empty_looks: rounds_with_empty_looks(&claims.empty_looks),
    })
}

/// What the idle worker did over the measured time.
struct Idle {
    measured: Duration,
    counts: Counts,
    /// Looks for work that found none.
    looks: u64,
}

/// Lets the worker idle for `duration` after its first look (which reads what is there once,
/// as any worker's start does), and counts its calls. It must claim nothing: every job there
/// is done or not ready.
async fn measure_idle(worker: &mut IdleWorker, duration: Duration) -> Result<Idle> {
    let first_look = Instant::now();
    while worker.idle_looks.load(Ordering::Relaxed) == 0 {
        if worker.task.is_finished() || first_look.elapsed() > CLAIM_TIMEOUT {
            bail!("the worker did not finish its first look within {CLAIM_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    worker.counting.reset();
    worker.idle_looks.store(0, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    let idle = Idle {
        counts: worker.counting.counts(),
        looks: worker.idle_looks.load(Ordering::Relaxed),
        measured: started.elapsed(),
    };
    if let Ok(claimed) = worker.claims.try_recv() {
        bail!(
            "the idle worker claimed job {} on {}, which should not have been ready",
            claimed.id,
            claimed.key
        );
    }
    Ok(idle)
}

/// Gives `n` keys under `prefix` a history: on each, one job submitted, claimed and completed,
/// by [`PREPARERS`] tasks at once. Progress goes to stderr (10,000 keys take a while on a
/// remote store).
async fn prepare_idle_keys(coord: &Arc<Coordinator>, prefix: &str, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let step = (n / 10).max(1);
    let mut tasks: Vec<JoinHandle<Result<()>>> = Vec::new();
    for first in 0..PREPARERS.min(n) {
        let (coord, done, prefix) = (coord.clone(), done.clone(), prefix.to_owned());
        tasks.push(tokio::spawn(async move {
            let options = SubmitOptions {
                context: "baton-bench jobs-idle: an idle key's past job".into(),
                ..SubmitOptions::default()
            };
            for k in (first..n).step_by(PREPARERS) {
                let key = format!("{prefix}idle-{k:05}");
                let id = jobs::submit(&coord, &key, PARAMS, &options)
                    .await
                    .with_context(|| format!("cannot submit a job to {key}"))?
                    .id;
                let job = jobs::claim(&coord, &key, &ClaimOptions::default())
                    .await
                    .with_context(|| format!("cannot claim job {id} on {key}"))?
                    .with_context(|| format!("job {id} on {key} was not ready after its submit"))?;
                job.complete(JobResult::Succeeded)
                    .await
                    .with_context(|| format!("cannot complete job {id} on {key}"))?;
                let count = done.fetch_add(1, Ordering::Relaxed) + 1;
                if count % step == 0 || count == n {
                    errln!(
                        "jobs-idle: {count}/{n} idle keys prepared ({:.1} s)",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await.context("a preparing task panicked")??;
    }
    Ok(())
}

/// Prints the report as a table.
pub fn print_idle(report: &IdleReport, out: &mut String) {
    outln!(
        out,
        "jobs-idle: an idle library worker next to {} keys whose jobs are done and {} with a job \
         ready only in an hour",
        report.idle_keys,
        report.queued_keys
    );
    outln!(
        out,
        "store:      {} ({}, {})",
        report.store,
        if report.pushes {
            "pushes"
        } else {
            "no push: polls"
        },
        if report.due_index {
            "due index"
        } else {
            "no due index: reads every key"
        }
    );
    outln!(out, "poll:       {:.0} ms", report.poll_ms);
    outln!(
        out,
        "load:       {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    outln!(out, "prepared:   in {:.1} s", report.prepare_s);
    outln!(out);
    outln!(
        out,
        "idle worker over {:.1} s, per minute:",
        report.measured_s
    );
    outln!(
        out,
        "{:>10} {:>10} {:>10} {:>10} {:>10}",
        "loads",
        "other",
        "cas",
        "clock",
        "looks"
    );
    outln!(
        out,
        "{:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
        report.loads_per_minute,
        report.other_per_minute,
        report.cas_per_minute,
        report.clock_per_minute,
        report.looks_per_minute
    );
    outln!(out);
    outln!(
        out,
        "then a fresh job's claim, {} rounds:",
        report.claim_ms.n
    );
    print_summary_header(out);
    print_summary_row("submit → claim", &report.claim_ms, out);
    outln!(out);
    print_empty_looks(report.rounds_with_empty_looks, report.claim_ms.n, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(key: &str, fence: u64, claimed_ms: u64, completing_ms: u64, origin: Instant) -> Run {
        let at = |ms| origin + Duration::from_millis(ms);
        Run {
            key: key.to_owned(),
            id: format!("j-{fence}"),
            fence,
            claimed: at(claimed_ms),
            completing: at(completing_ms),
            completed: Some(at(completing_ms + 1)),
        }
    }

    #[test]
    fn serialisation_violations_are_found_per_key() {
        let t = Instant::now();
        // Key a: one after the other, fences rising. Key b overlaps key a in time (allowed).
        let fine = [
            run("a", 1, 0, 10, t),
            run("a", 2, 10, 20, t),
            run("b", 1, 5, 15, t),
            run("b", 5, 30, 40, t),
        ];
        let (overlaps, not_rising) = check_serialised(&fine);
        assert!(overlaps.is_empty() && not_rising.is_empty());

        // Key a: the second run starts before the first ends; key b: a fence falls.
        let bad = [
            run("a", 1, 0, 10, t),
            run("a", 2, 9, 20, t),
            run("b", 7, 0, 1, t),
            run("b", 7, 2, 3, t),
        ];
        let (overlaps, not_rising) = check_serialised(&bad);
        let pairs = |v: &[Violation]| -> Vec<(String, u64, u64)> {
            v.iter()
                .map(|v| (v.key.clone(), v.earlier_fence, v.later_fence))
                .collect()
        };
        assert_eq!(pairs(&overlaps), vec![("a".to_owned(), 1, 2)]);
        assert_eq!(pairs(&not_rising), vec![("b".to_owned(), 7, 7)]);
    }
}
