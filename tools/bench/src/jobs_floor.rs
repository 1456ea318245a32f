//! `jobs-floor`: what a job queue kept as one row per key, claimed and completed by
//! compare-and-swap, costs on PostgreSQL at the least — the floor under `jobs-throughput`.
//!
//! baton keeps a key's queue in one document and changes it only by compare-and-swap, so a
//! worker cannot lock a job and skip the locked ones in one statement (graphile-worker's
//! `get_job`). Per job it needs at least a read of the due index, a claim that must win its
//! CAS, and a completion. This runs exactly those statements and nothing else: the row holds a
//! version, the count of jobs left and the due time; the first keys due come with the index
//! read (as baton's `WithDocs`); no history, lease, parameters, wake-up or rule. A claim that
//! loses its CAS tries the next key, the next few in a random order (as baton's workers do).
//! What baton costs above this is baton's; what this costs is the design's.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use sqlx::Connection;
use tokio::sync::Barrier;

use crate::setup::{describe_load, is_postgres, load_average_1m};

/// The floor's table, dropped and made again at each run (its name is written out in each
/// statement below: sqlx takes only literal statements).
const PREPARE: [&str; 3] = [
    "DROP TABLE IF EXISTS baton_bench_jobs_floor",
    "CREATE TABLE baton_bench_jobs_floor (k text PRIMARY KEY, v bigint NOT NULL, \
     jobs_left int NOT NULL, due bigint)",
    "CREATE INDEX ON baton_bench_jobs_floor (due, k) WHERE due IS NOT NULL",
];

/// `$1` keys holding `$2` jobs between them, due in the keys' order.
const FILL: &str = "INSERT INTO baton_bench_jobs_floor (k, v, jobs_left, due) \
     SELECT 'k' || lpad(i::text, 6, '0'), 0, $2 / $1 + CASE WHEN i < $2 % $1 THEN 1 ELSE 0 END, i \
     FROM generate_series(0, $1 - 1) AS i";

/// The first `$1` keys due, with their row's version.
const LOOK_AT_DUE: &str =
    "SELECT k, v FROM baton_bench_jobs_floor WHERE due IS NOT NULL ORDER BY due, k LIMIT $1";

/// A claim of key `$1` by CAS on version `$2`: it takes the key out of the due index.
const CLAIM: &str =
    "UPDATE baton_bench_jobs_floor SET v = v + 1, due = NULL WHERE k = $1 AND v = $2";

/// A completion of key `$1` by CAS on version `$2`: one job fewer, due at `$3` if any is left.
const COMPLETE: &str = "UPDATE baton_bench_jobs_floor SET v = v + 1, jobs_left = jobs_left - 1, \
     due = CASE WHEN jobs_left > 1 THEN $3 END WHERE k = $1 AND v = $2";

/// Keys, with their row, read along with each look at the due index (baton's `DUE_DOCS`).
const LOOK: i64 = 8;

/// How many of the next keys a worker tries in a random order after losing one (baton's
/// `LOSER_SPREAD`).
const SPREAD: usize = 4;

/// A run with no completion for this long has stalled.
const STALL: Duration = Duration::from_secs(60);

/// The results of `jobs-floor`.
#[derive(Debug, Serialize)]
pub struct FloorReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// Whether the database was vacuumed before the timed part ([`crate::setup::vacuum`]).
    pub vacuumed: bool,
    /// Keys the jobs were spread over.
    pub keys: usize,
    /// Jobs.
    pub jobs: usize,
    /// Workers, each a task with its own connection.
    pub workers: usize,
    /// From the workers' start to the last completion.
    pub elapsed_s: f64,
    /// Jobs completed per second.
    pub jobs_per_s: f64,
    /// Statements sent per job: looks, claims (won and lost) and completions.
    pub statements_per_job: f64,
    /// Claims per job that lost their CAS to another worker.
    pub lost_claims_per_job: f64,
    /// Looks at the due index per job.
    pub looks_per_job: f64,
}

/// What the workers count together.
#[derive(Default)]
struct Tally {
    completed: AtomicUsize,
    looks: AtomicU64,
    claims: AtomicU64,
    lost: AtomicU64,
    completions: AtomicU64,
}

/// Runs `jobs` no-op jobs over `keys` keys through `workers` workers on the PostgreSQL at `url`.
/// With `vacuum`, the database is vacuumed before the timed part ([`crate::setup::vacuum`]).
pub async fn floor(
    url: &str,
    keys: usize,
    jobs: usize,
    workers: usize,
    vacuum: bool,
) -> Result<FloorReport> {
    if !is_postgres(url) {
        bail!("jobs-floor runs on PostgreSQL only: give --store postgres://…");
    }
    let load_average_1m = load_average_1m();
    prepare(url, keys, jobs).await?;
    if vacuum {
        crate::setup::vacuum(url).await?;
    }
    let tally = Arc::new(Tally::default());
    let start = Arc::new(Barrier::new(workers + 1));
    let mut tasks = Vec::with_capacity(workers);
    for _ in 0..workers {
        let conn = sqlx::PgConnection::connect(url)
            .await
            .with_context(|| format!("cannot connect to {url}"))?;
        let (tally, start) = (tally.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            work(conn, &tally, jobs).await
        }));
    }
    start.wait().await;
    let started = Instant::now();
    for task in tasks {
        task.await.context("a floor worker panicked")??;
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let completed = tally.completed.load(Ordering::SeqCst);
    ensure!(completed == jobs, "{completed} of {jobs} jobs completed");
    let per_job = |n: &AtomicU64| n.load(Ordering::SeqCst) as f64 / jobs as f64;
    let statements = per_job(&tally.looks) + per_job(&tally.claims) + per_job(&tally.completions);
    Ok(FloorReport {
        load_average_1m,
        vacuumed: vacuum,
        keys,
        jobs,
        workers,
        elapsed_s,
        jobs_per_s: jobs as f64 / elapsed_s,
        statements_per_job: statements,
        lost_claims_per_job: per_job(&tally.lost),
        looks_per_job: per_job(&tally.looks),
    })
}

/// A fresh table with `keys` rows holding `jobs` jobs between them, due in the keys' order.
async fn prepare(url: &str, keys: usize, jobs: usize) -> Result<()> {
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .with_context(|| format!("cannot connect to {url}"))?;
    for statement in PREPARE {
        sqlx::query(statement)
            .execute(&mut conn)
            .await
            .with_context(|| format!("cannot prepare the floor's table: {statement}"))?;
    }
    let (keys, jobs) = (i64::try_from(keys)?, i64::try_from(jobs)?);
    sqlx::query(FILL)
        .bind(keys)
        .bind(jobs)
        .execute(&mut conn)
        .await
        .context("cannot fill the floor's table")?;
    let statement = "DELETE FROM baton_bench_jobs_floor WHERE jobs_left = 0";
    sqlx::query(statement)
        .execute(&mut conn)
        .await
        .with_context(|| format!("cannot prepare the floor's table: {statement}"))?;
    Ok(())
}

/// One worker: look, claim the first key whose CAS wins, complete it; until every job is done.
async fn work(mut conn: sqlx::PgConnection, tally: &Tally, jobs: usize) -> Result<()> {
    let epoch = Instant::now();
    let mut last_progress = Instant::now();
    while tally.completed.load(Ordering::SeqCst) < jobs {
        ensure!(
            last_progress.elapsed() < STALL,
            "no job completed for {STALL:?}"
        );
        tally.looks.fetch_add(1, Ordering::Relaxed);
        let mut due: Vec<(String, i64)> = sqlx::query_as(LOOK_AT_DUE)
            .bind(LOOK)
            .fetch_all(&mut conn)
            .await
            .context("the floor's look")?;
        let mut claimed = None;
        for i in 0..due.len() {
            let (key, version) = std::mem::take(&mut due[i]);
            tally.claims.fetch_add(1, Ordering::Relaxed);
            let won = sqlx::query(CLAIM)
                .bind(&key)
                .bind(version)
                .execute(&mut conn)
                .await
                .context("the floor's claim")?
                .rows_affected()
                == 1;
            if won {
                claimed = Some((key, version + 1));
                break;
            }
            tally.lost.fetch_add(1, Ordering::Relaxed);
            spread(&mut due[i + 1..]);
        }
        let Some((key, version)) = claimed else {
            // Every key due was taken first, or none is due while the last jobs run.
            tokio::task::yield_now().await;
            continue;
        };
        tally.completions.fetch_add(1, Ordering::Relaxed);
        let due_again = i64::try_from(epoch.elapsed().as_micros())?.saturating_add(1 << 40);
        let done = sqlx::query(COMPLETE)
            .bind(&key)
            .bind(version)
            .bind(due_again)
            .execute(&mut conn)
            .await
            .context("the floor's completion")?
            .rows_affected();
        ensure!(
            done == 1,
            "the completion of {key} lost its CAS: two claims won"
        );
        tally.completed.fetch_add(1, Ordering::SeqCst);
        last_progress = Instant::now();
    }
    Ok(())
}

/// The next few keys in a random order, after a lost claim.
fn spread<T>(rest: &mut [T]) {
    let n = rest.len().min(SPREAD);
    for i in (1..n).rev() {
        rest.swap(i, rand_below(i + 1));
    }
}

/// A number below `n` (n > 0), from the standard library's randomly keyed hasher.
fn rand_below(n: usize) -> usize {
    use std::hash::{BuildHasher, RandomState};
    let x = RandomState::new().hash_one(Instant::now());
    usize::try_from(x % n as u64).unwrap_or(0)
}

/// The report as a table.
pub fn print_floor(report: &FloorReport, out: &mut String) {
    outln!(
        out,
        "jobs-floor: {} no-op jobs over {} keys, {} workers: one row per key, a look at the \
         due index, a claim by CAS, a completion by CAS; nothing else",
        report.jobs,
        report.keys,
        report.workers
    );
    outln!(
        out,
        "load:       {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    if report.vacuumed {
        outln!(
            out,
            "vacuumed:   the database, after the table was filled (--no-vacuum: not)"
        );
    }
    outln!(out);
    outln!(
        out,
        "{:>8} {:>10} {:>10} {:>14} {:>12} {:>12}",
        "jobs",
        "time (s)",
        "jobs/s",
        "statements/job",
        "looks/job",
        "lost/job"
    );
    outln!(
        out,
        "{:>8} {:>10.2} {:>10.0} {:>14.2} {:>12.2} {:>12.2}",
        report.jobs,
        report.elapsed_s,
        report.jobs_per_s,
        report.statements_per_job,
        report.looks_per_job,
        report.lost_claims_per_job
    );
}
