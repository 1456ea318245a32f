//! `handoff`: from the holder's release to the next holder's turn, across two processes.
//!
//! This process holds the key through the library; a second process waits for it. Once the
//! library shows the waiter's ticket queued behind ours (two tickets in the key's document), and
//! after a settling pause (`--settle`, 100 ms by default: the waiter subscribes to the store's
//! wake-ups only after it has queued, and a release before that is found by its first read
//! rather than pushed — a case, but not the steady one measured here), we read CLOCK_REALTIME
//! as t0 and release; the waiter reads CLOCK_REALTIME as t1 when its turn
//! starts and writes it to FILE. The waiter is either
//!
//! - `baton run -q … -- baton-bench stamp FILE` (`--waiter run`, the default): t1 is read first
//!   thing by the command, so t1 − t0 is everything a user waits for: the release's write, the
//!   waiter's wake-up and read, its claim, and the start of its command; or
//! - `baton-bench grant-stamp` (`--waiter library`), which waits through the library as `baton
//!   run` does (`acquire_many` with a heartbeat, whose first renewal claims a fresh grant) and
//!   reads t1 the moment it returns: the handoff between the two processes' library calls,
//!   without the cost of starting a command.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use baton_client::acquire::{acquire, acquire_many, release, AcquireOptions, Pending};
use baton_client::{Coordinator, Heartbeat, LeaseGuard};
use baton_core::{Outcome, TicketState};
use serde::Serialize;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use crate::setup::{
    baton_path, describe_load, fresh_key, load_average_1m, own_path, read_ns, realtime_ns, Workdir,
};
use crate::stats::Summary;
use crate::Common;

/// The goal for a `baton run` waiter: a median handoff under this (set for SQLite).
const GOAL_P50_MS_RUN: f64 = 20.0;
/// The goal for a library waiter (release to grant): a median under this on loopback (set for
/// the stores that push: PostgreSQL, Redis, etcd).
const GOAL_P50_MS_LIBRARY: f64 = 2.0;

/// Who waits for the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Waiter {
    /// `baton run -q … -- baton-bench stamp FILE`: release to the command's start.
    Run,
    /// `baton-bench grant-stamp`: release to `acquire` returning in the other process.
    Library,
}

/// How long the waiter may take to enqueue before the round is given up.
const ENQUEUE_TIMEOUT: Duration = Duration::from_secs(10);

/// The results of `handoff`.
#[derive(Debug, Serialize)]
pub struct HandoffReport {
    /// The host's 1-minute load average when the run started.
    pub load_average_1m: Option<f64>,
    /// The store.
    pub store: String,
    /// The baton binary the waiters ran.
    pub baton: PathBuf,
    /// Measured handoffs.
    pub rounds: usize,
    /// Unmeasured handoffs before them.
    pub warmup: usize,
    /// Who waited.
    pub waiter: Waiter,
    /// The pause between seeing the waiter queued and releasing, in ms.
    pub settle_ms: f64,
    /// The waiter's command line, as run (FILE changes per round).
    pub waiter_command: String,
    /// Release (t0) to the waiter's turn (t1): its command starting, or its `acquire` returning.
    pub handoff_ms: Summary,
    /// Every measured handoff, in order.
    pub samples_ms: Vec<f64>,
    /// The goal for the median: on a store that cannot push, the default shortest poll
    /// interval (the next in line reads that often).
    pub goal_p50_ms: f64,
    /// Whether the goal was met.
    pub goal_met: bool,
}

/// Runs the benchmark.
pub async fn run(
    common: &Common,
    waiter_kind: Waiter,
    settle: Duration,
    rounds: usize,
    warmup: usize,
) -> Result<HandoffReport> {
    let load_average_1m = load_average_1m();
    let workdir = Workdir::new(common)?;
    workdir.require_shared_store("`handoff`")?;
    let baton = baton_path(common)?;
    let harness = own_path()?;
    let store = crate::setup::open_store(&workdir.store_url).await?;
    let pushes = store.capabilities().watch;
    let coord = Coordinator::new(store);
    let key = fresh_key("handoff");
    let options = AcquireOptions {
        timeout: Some(Duration::from_secs(30)),
        context: "baton-bench handoff holder".into(),
        ..AcquireOptions::default()
    };
    let waiter_program = match waiter_kind {
        Waiter::Run => baton.clone(),
        Waiter::Library => harness.clone(),
    };
    let waiter_args = |stamp: &PathBuf| -> Vec<String> {
        if waiter_kind == Waiter::Library {
            return vec![
                "grant-stamp".into(),
                "--store".into(),
                workdir.store_url.clone(),
                key.clone(),
                stamp.display().to_string(),
            ];
        }
        vec![
            "run".into(),
            "-q".into(),
            "--store".into(),
            workdir.store_url.clone(),
            key.clone(),
            "--".into(),
            harness.display().to_string(),
            "stamp".into(),
            stamp.display().to_string(),
        ]
    };

    let mut samples = Vec::with_capacity(rounds);
    for round in 0..warmup + rounds {
        let pending = Pending::new(&key);
        let lease = acquire(&coord, &pending, &options)
            .await
            .with_context(|| format!("round {round}: the holder could not acquire {key}"))?;
        let stamp = workdir.path(&format!("stamp-{round}"));
        let mut waiter = Command::new(&waiter_program)
            .args(waiter_args(&stamp))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot run {}", waiter_program.display()))?;
        wait_until_queued(&coord, &key, &pending.id, &mut waiter)
            .await
            .with_context(|| format!("round {round}"))?;
        tokio::time::sleep(settle).await;
        let t0 = realtime_ns();
        release(&coord, &key, &lease.token, Outcome::Succeeded)
            .await
            .with_context(|| format!("round {round}: the holder could not release {key}"))?;
        let output = waiter
            .wait_with_output()
            .await
            .context("lost track of the waiting baton")?;
        if !output.status.success() {
            bail!(
                "round {round}: the waiting baton failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let t1 = read_ns(&stamp)?;
        let Some(handoff_ns) = t1.checked_sub(t0) else {
            bail!(
                "round {round}: the waiter's command started {} µs before the release \
                 (CLOCK_REALTIME stepped, or the waiter did not wait)",
                (t0 - t1) / 1000
            );
        };
        if round >= warmup {
            samples.push(Duration::from_nanos(
                u64::try_from(handoff_ns).context("a handoff of more than 500 years")?,
            ));
        }
    }
    let handoff_ms = Summary::of(&samples).context("no rounds were measured")?;
    let goal_p50_ms = match waiter_kind {
        // A store that cannot push is read by the next in line every shortest poll interval
        // (±20%): on average the release is found half an interval later.
        _ if !pushes => baton_client::poll::DEFAULT_MIN.as_secs_f64() * 1e3,
        Waiter::Run => GOAL_P50_MS_RUN,
        Waiter::Library => GOAL_P50_MS_LIBRARY,
    };
    Ok(HandoffReport {
        load_average_1m,
        store: workdir.store_url.clone(),
        waiter: waiter_kind,
        settle_ms: settle.as_secs_f64() * 1e3,
        waiter_command: format!(
            "{} {}",
            waiter_program.display(),
            waiter_args(&workdir.path("stamp-N")).join(" ")
        ),
        baton,
        rounds,
        warmup,
        goal_met: handoff_ms.p50_ms < goal_p50_ms,
        samples_ms: samples.iter().map(|d| d.as_secs_f64() * 1e3).collect(),
        handoff_ms,
        goal_p50_ms,
    })
}

/// The `--waiter library` process: waits for `key` through the library as `baton run` does
/// (`acquire_many` with a heartbeat), writes CLOCK_REALTIME in ns to `stamp` the moment it
/// returns, then releases.
pub async fn grant_stamp(store_url: &str, key: &str, stamp: &std::path::Path) -> Result<()> {
    let store = crate::setup::open_store(store_url).await?;
    let coord = Arc::new(Coordinator::new(store));
    let heartbeat = Heartbeat::start(coord.clone());
    let options = AcquireOptions {
        timeout: Some(Duration::from_secs(30)),
        context: "baton-bench handoff waiter".into(),
        ..AcquireOptions::default()
    };
    let leases = acquire_many(&coord, &[Pending::new(key)], &options, &heartbeat)
        .await
        .with_context(|| format!("the waiter could not acquire {key}"))?;
    let granted_ns = realtime_ns();
    std::fs::write(stamp, granted_ns.to_string())
        .with_context(|| format!("cannot write the stamp to {}", stamp.display()))?;
    LeaseGuard::new(coord, leases, heartbeat)
        .release(Outcome::Succeeded)
        .await
        .with_context(|| format!("the waiter could not release {key}"))?;
    Ok(())
}

/// Reads the key until its document shows two tickets: ours holding and the waiter's queued.
/// Fails if the waiter exits first or takes longer than [`ENQUEUE_TIMEOUT`].
async fn wait_until_queued(
    coord: &Coordinator,
    key: &str,
    holder_id: &str,
    waiter: &mut Child,
) -> Result<()> {
    let started = Instant::now();
    loop {
        let snapshot = coord.read(key).await.context("cannot read the key")?;
        if let Some(doc) = &snapshot.doc {
            let ours_held = doc
                .by_id(holder_id)
                .is_some_and(|t| t.state == TicketState::Held);
            let waiter_queued = doc
                .tickets
                .iter()
                .any(|t| t.id != holder_id && t.state == TicketState::Queued);
            if !ours_held {
                bail!("our ticket no longer holds the key");
            }
            if doc.tickets.len() == 2 && waiter_queued {
                return Ok(());
            }
        }
        if let Some(status) = waiter
            .try_wait()
            .context("lost track of the waiting baton")?
        {
            let mut stderr = String::new();
            if let Some(pipe) = waiter.stderr.as_mut() {
                let _ = pipe.read_to_string(&mut stderr).await;
            }
            bail!(
                "the waiting baton exited ({status}) before it queued: {}",
                stderr.trim()
            );
        }
        if started.elapsed() > ENQUEUE_TIMEOUT {
            bail!(
                "the waiting baton did not queue within {} s",
                ENQUEUE_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Prints the report as a table.
pub fn print(report: &HandoffReport, out: &mut String) {
    let (waiter, until) = match report.waiter {
        Waiter::Run => ("baton run -q", "release -> command start (ms)"),
        Waiter::Library => ("another process (library)", "release -> grant (ms)"),
    };
    outln!(
        out,
        "handoff: {} rounds after {} warm-up; holder: this process (library), waiter: {waiter}",
        report.rounds,
        report.warmup
    );
    outln!(
        out,
        "settle:  {:.0} ms between seeing the waiter queued and releasing",
        report.settle_ms
    );
    outln!(out, "store:   {}", report.store);
    outln!(
        out,
        "load:    {} (1-minute average at the start)",
        describe_load(report.load_average_1m)
    );
    outln!(out);
    let s = &report.handoff_ms;
    outln!(
        out,
        "{:<34} {:>8} {:>8} {:>8} {:>8} {:>8}",
        until,
        "min",
        "p50",
        "p90",
        "p99",
        "max"
    );
    outln!(
        out,
        "{:<34} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
        "handoff",
        s.min_ms,
        s.p50_ms,
        s.p90_ms,
        s.p99_ms,
        s.max_ms
    );
    outln!(out);
    outln!(
        out,
        "goal: p50 under {:.0} ms: {}",
        report.goal_p50_ms,
        if report.goal_met { "met" } else { "NOT met" }
    );
}
