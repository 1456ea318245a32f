//! `process`: what a whole `baton run` costs a script, next to the simplest lock a script can
//! take on one host, `flock FILE true`.
//!
//! One of each per round, alternating which goes first, so that whatever else the machine does
//! (another build, the page cache, CPU frequency) falls on both alike rather than on whichever
//! ran in a quiet stretch. Each is timed from just before the spawn to just after its exit has
//! been reaped, as a shell would see it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::setup::{baton_path, describe_load, fresh_key, load_average_1m, Workdir};
use crate::stats::Summary;
use crate::Common;

/// The goal: a `baton run` within this factor of `flock` (medians).
const GOAL_RATIO: f64 = 5.0;

/// The results of `process`.
#[derive(Debug, Serialize)]
pub struct ProcessReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store the baton runs used.
    pub store: String,
    /// The baton binary.
    pub baton: PathBuf,
    /// Measured rounds.
    pub rounds: usize,
    /// Unmeasured rounds before them.
    pub warmup: usize,
    /// The baton command line, as run.
    pub baton_command: String,
    /// The flock command line, as run.
    pub flock_command: String,
    /// `baton run … -- true`, whole process.
    pub baton_ms: Summary,
    /// `flock FILE true`, whole process.
    pub flock_ms: Summary,
    /// Median of baton over median of flock.
    pub ratio_of_medians: f64,
    /// The goal for that ratio.
    pub goal_ratio: f64,
    /// Whether the goal was met.
    pub goal_met: bool,
}

/// Runs the benchmark.
pub async fn run(common: &Common, rounds: usize, warmup: usize) -> Result<ProcessReport> {
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    workdir.require_shared_store("`process`")?;
    let baton = baton_path(common)?;
    let key = fresh_key("process");
    let lock_file = workdir.path("flock.lock");
    let baton_args: Vec<String> = vec![
        "run".into(),
        "--store".into(),
        workdir.store_url.clone(),
        key,
        "--".into(),
        "true".into(),
    ];
    let flock_args: Vec<String> = vec![lock_file.display().to_string(), "true".into()];
    let flock = Path::new("flock");

    let mut baton_times = Vec::with_capacity(rounds);
    let mut flock_times = Vec::with_capacity(rounds);
    for round in 0..warmup + rounds {
        let baton_first = round % 2 == 0;
        let (baton_time, flock_time) = if baton_first {
            let b = time_command(&baton, &baton_args)?;
            (b, time_command(flock, &flock_args)?)
        } else {
            let f = time_command(flock, &flock_args)?;
            (time_command(&baton, &baton_args)?, f)
        };
        if round >= warmup {
            baton_times.push(baton_time);
            flock_times.push(flock_time);
        }
    }
    let baton_ms = Summary::of(&baton_times).context("no rounds were measured")?;
    let flock_ms = Summary::of(&flock_times).context("no rounds were measured")?;
    let ratio_of_medians = baton_ms.p50_ms / flock_ms.p50_ms;
    Ok(ProcessReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        baton_command: format!("{} {}", baton.display(), baton_args.join(" ")),
        flock_command: format!("flock {}", flock_args.join(" ")),
        baton,
        rounds,
        warmup,
        baton_ms,
        flock_ms,
        ratio_of_medians,
        goal_ratio: GOAL_RATIO,
        goal_met: ratio_of_medians <= GOAL_RATIO,
    })
}

/// Runs `program args` to completion and returns how long it took; fails unless it exits 0.
fn time_command(program: &Path, args: &[String]) -> Result<Duration> {
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let output = command
        .output()
        .with_context(|| format!("cannot run {}", program.display()))?;
    let elapsed = started.elapsed();
    if !output.status.success() {
        bail!(
            "`{} {}` failed ({}): {}",
            program.display(),
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(elapsed)
}

/// Prints the report as a table.
pub fn print(report: &ProcessReport) {
    println!(
        "process: {} rounds after {} warm-up, one of each per round, alternating which goes first",
        report.rounds, report.warmup
    );
    println!("store:   {}", report.store);
    println!(
        "load:    {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    println!();
    println!(
        "{:<40} {:>8} {:>8} {:>8} {:>8}",
        "whole process (ms)", "min", "median", "p90", "max"
    );
    for (name, s) in [
        ("baton run --store S k -- true", &report.baton_ms),
        ("flock FILE true", &report.flock_ms),
    ] {
        println!(
            "{:<40} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
            name, s.min_ms, s.p50_ms, s.p90_ms, s.max_ms
        );
    }
    println!();
    println!(
        "ratio of medians (baton / flock): {:.1}x; goal: within {:.0}x: {}",
        report.ratio_of_medians,
        report.goal_ratio,
        if report.goal_met { "met" } else { "NOT met" }
    );
}
