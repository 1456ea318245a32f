//! `process`: what a whole `baton run` costs a script, next to the lock a script would take
//! without baton: `flock FILE true` on one host, or `etcdctl lock KEY true` when the store is
//! etcd (the lock etcd's own client offers, over the same server).
//!
//! One of each per round, alternating which goes first, so that whatever else the machine does
//! (another build, the page cache, CPU frequency) falls on both alike rather than on whichever
//! ran in a quiet stretch. Each is timed from just before the spawn to just after its exit has
//! been reaped, as a shell would see it, and its CPU time is taken from the kernel's account of
//! reaped children (user + system, its own descendants included): on a machine whose neighbours
//! steal time, CPU time moves far less from run to run than the wall clock does.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::setup::{baton_path, describe_load, fresh_key, load_average_1m, Workdir};
use crate::stats::Summary;
use crate::Common;

/// B7's goal: a `baton run` within this factor of `flock` (medians); `peers` judges by it too.
pub const GOAL_RATIO_FLOCK: f64 = 2.0;
/// B7's goal on etcd: a `baton run` within this factor of `etcdctl lock` (medians).
pub const GOAL_RATIO_ETCDCTL: f64 = 0.3;

/// The lock baton is measured against.
#[derive(Debug)]
enum Baseline {
    /// `flock FILE true`.
    Flock,
    /// `etcdctl --endpoints E lock KEY true`.
    Etcdctl { endpoints: String },
}

impl Baseline {
    /// `etcdctl lock` for an `etcd://host:port[,host:port]/prefix` store, else `flock`.
    fn for_store(url: &str) -> Result<Baseline> {
        if !url.starts_with("etcd://") {
            return Ok(Baseline::Flock);
        }
        Ok(Baseline::Etcdctl {
            endpoints: crate::peers::contenders::etcd_endpoints(url)?,
        })
    }
}

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
    /// The baseline's command line, as run: `flock FILE true`, or `etcdctl … lock KEY true`
    /// on an etcd store.
    pub baseline_command: String,
    /// `baton run … -- true`, whole process.
    pub baton_ms: Summary,
    /// The baseline, whole process.
    pub baseline_ms: Summary,
    /// Median of baton over median of the baseline.
    pub ratio_of_medians: f64,
    /// `baton run`'s CPU time (user + system, with its supervisor and CMD).
    pub baton_cpu_ms: Summary,
    /// The baseline's CPU time (with its CMD).
    pub baseline_cpu_ms: Summary,
    /// Median CPU time of baton over that of the baseline.
    pub cpu_ratio_of_medians: f64,
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
    let baseline = Baseline::for_store(&workdir.store_url)?;
    let (base_program, base_args, goal_ratio) = match &baseline {
        Baseline::Flock => (
            Path::new("flock"),
            vec![lock_file.display().to_string(), "true".into()],
            GOAL_RATIO_FLOCK,
        ),
        Baseline::Etcdctl { endpoints } => (
            Path::new("etcdctl"),
            vec![
                format!("--endpoints={endpoints}"),
                "lock".into(),
                fresh_key("process-etcdctl"),
                "true".into(),
            ],
            GOAL_RATIO_ETCDCTL,
        ),
    };

    let mut baton_runs = Vec::with_capacity(rounds);
    let mut base_runs = Vec::with_capacity(rounds);
    for round in 0..warmup + rounds {
        let baton_first = round % 2 == 0;
        let (baton_run, base_run) = if baton_first {
            let b = measure_command(&baton, &baton_args)?;
            (b, measure_command(base_program, &base_args)?)
        } else {
            let f = measure_command(base_program, &base_args)?;
            (measure_command(&baton, &baton_args)?, f)
        };
        if round >= warmup {
            baton_runs.push(baton_run);
            base_runs.push(base_run);
        }
    }
    let summary = |runs: &[Measured], of: fn(&Measured) -> Duration| {
        let values: Vec<Duration> = runs.iter().map(of).collect();
        Summary::of(&values).context("no rounds were measured")
    };
    let baton_ms = summary(&baton_runs, |m| m.wall)?;
    let baseline_ms = summary(&base_runs, |m| m.wall)?;
    let baton_cpu_ms = summary(&baton_runs, |m| m.cpu)?;
    let baseline_cpu_ms = summary(&base_runs, |m| m.cpu)?;
    let ratio_of_medians = baton_ms.p50_ms / baseline_ms.p50_ms;
    let cpu_ratio_of_medians = baton_cpu_ms.p50_ms / baseline_cpu_ms.p50_ms;
    Ok(ProcessReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        baton_command: format!("{} {}", baton.display(), baton_args.join(" ")),
        baseline_command: format!("{} {}", base_program.display(), base_args.join(" ")),
        baton,
        rounds,
        warmup,
        baton_ms,
        baseline_ms,
        ratio_of_medians,
        baton_cpu_ms,
        baseline_cpu_ms,
        cpu_ratio_of_medians,
        goal_ratio,
        goal_met: ratio_of_medians <= goal_ratio,
    })
}

/// One run of a command: its wall time and its CPU time.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    /// From just before the spawn to just after the exit was reaped.
    pub wall: Duration,
    /// User + system time of the command and of its descendants that were reaped.
    pub cpu: Duration,
}

/// Runs `program args` to completion, measuring its wall and CPU time; fails unless it exits 0.
/// The CPU time is what the kernel added to this process's account of reaped children while the
/// command ran, so nothing else may spawn and reap children of this process meanwhile: the
/// harness runs its commands one at a time.
pub fn measure_command(program: &Path, args: &[String]) -> Result<Measured> {
    let cpu_before = children_cpu()?;
    let wall = time_command(program, args)?;
    let cpu = children_cpu()?.saturating_sub(cpu_before);
    Ok(Measured { wall, cpu })
}

/// User + system time of this process's children that have ended and been reaped.
fn children_cpu() -> Result<Duration> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one `rusage` into the pointer it is given, which points at a
    // zeroed value of that type owned by this frame.
    let status = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) };
    if status != 0 {
        return Err(std::io::Error::last_os_error()).context("getrusage(RUSAGE_CHILDREN)");
    }
    // SAFETY: getrusage succeeded, so it filled the value (which was zeroed before anyway).
    let usage = unsafe { usage.assume_init() };
    let of = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    Ok(of(usage.ru_utime) + of(usage.ru_stime))
}

/// Runs `program args` to completion and returns how long it took; fails unless it exits 0.
pub fn time_command(program: &Path, args: &[String]) -> Result<Duration> {
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    // etcdctl reads ETCDCTL_API; 3 is the default of every etcdctl that has `lock`, but a
    // user's environment could say 2.
    command.env("ETCDCTL_API", "3");
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
pub fn print(report: &ProcessReport, out: &mut String) {
    outln!(
        out,
        "process: {} rounds after {} warm-up, one of each per round, alternating which goes first",
        report.rounds,
        report.warmup
    );
    outln!(out, "store:   {}", report.store);
    outln!(
        out,
        "load:    {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    let baseline = report
        .baseline_command
        .split_whitespace()
        .next()
        .unwrap_or_default();
    let baseline_name = if baseline == "etcdctl" {
        "etcdctl lock k true"
    } else {
        "flock FILE true"
    };
    let baton_name = "baton run --store S k -- true";
    let tables = [
        ("whole process (ms)", &report.baton_ms, &report.baseline_ms),
        (
            "CPU, user + system (ms)",
            &report.baton_cpu_ms,
            &report.baseline_cpu_ms,
        ),
    ];
    for (title, baton, base) in tables {
        outln!(out);
        outln!(
            out,
            "{:<40} {:>8} {:>8} {:>8} {:>8}",
            title,
            "min",
            "median",
            "p90",
            "max"
        );
        for (name, s) in [(baton_name, baton), (baseline_name, base)] {
            outln!(
                out,
                "{:<40} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                name,
                s.min_ms,
                s.p50_ms,
                s.p90_ms,
                s.max_ms
            );
        }
    }
    outln!(out);
    outln!(
        out,
        "ratio of medians (baton / {}): {:.2}x; goal: within {}x: {}",
        baseline,
        report.ratio_of_medians,
        report.goal_ratio,
        if report.goal_met { "met" } else { "NOT met" }
    );
    outln!(
        out,
        "ratio of median CPU times (baton / {}): {:.2}x",
        baseline,
        report.cpu_ratio_of_medians
    );
}
