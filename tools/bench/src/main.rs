//! `baton-bench`: the figures criterion cannot take, because they need whole processes or
//! several of them. The in-process figures are criterion benches (`cargo bench -p baton-client`,
//! `cargo bench -p baton-core`); `BENCHMARKS.md` says how to run both and keeps the results.
//!
//! # Layout
//!
//! - [`process`]: the cost of a whole `baton run … -- true` next to `flock FILE true`.
//! - [`handoff`]: how long a waiting `baton run` takes to start its command after the holder
//!   releases (the holder is this process, through the library).
//! - [`throughput`]: uncontended acquire + release cycles of one library client (with the store
//!   round trips each costs), and many processes cycling on one key (with the fences checked).
//! - [`polling`]: store requests per waiter and minute, by place in the queue (what waiting
//!   costs on S3 and DynamoDB, where every read is billed).
//! - [`jobs`]: job queues through library workers: jobs per second with each key strictly one
//!   run at a time (checked), an idle worker's claim latency after a submit, and what an idle
//!   worker costs next to many keys whose jobs are done.
//! - [`peers`]: baton next to flock, Redis `SET NX`, PostgreSQL advisory locks, etcd's lock,
//!   the seed S3 list lock and DynamoDB conditional puts, on the same stores in one run.
//! - [`jobs_floor`]: the least a job queue of one row per key, claimed and completed by
//!   compare-and-swap, costs on PostgreSQL: the floor under `jobs-throughput`.
//! - [`counting`]: a `Store` wrapper that counts calls, for the round trips.
//! - [`stats`]: percentiles; [`setup`]: the store, the temporary directory and the clocks.
//!
//! Every subcommand prints a small table, or with `--json` one JSON object on stdout.

/// Appends one formatted line to a table being built in a `String` (`outln!(out, "{x}")`).
/// Tables are built whole and written once by [`output`], so that a reader gone (`| head`) ends
/// the output instead of panicking in `println!`. Writing into a `String` cannot fail.
macro_rules! outln {
    ($out:expr) => {
        $out.push('\n')
    };
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

/// Writes one line to standard error: progress, a goal not met, the error that ended a run.
/// `eprintln!` panics when standard error's reader has gone (`baton-bench … 2>&1 | head`), and
/// nothing written there is worth a panic: a failed write is dropped.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod backlog;
mod counting;
mod delay_proxy;
mod handoff;
mod hot_floor;
mod jobs;
mod jobs_floor;
mod notify_kv;
mod peers;
mod polling;
mod process;
mod serve_bench;
mod serve_polling;
mod setup;
mod stats;
mod throughput;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

/// The exit status of `peers` when the run went through and some goal was not met (1 is an
/// error: the run did not go through).
const GOALS_NOT_MET: i32 = 3;

/// Rounds below which the percentiles reported (p90, p99) say little.
const MIN_ROUNDS: usize = 30;

#[derive(Parser)]
#[command(
    name = "baton-bench",
    about = "Whole-process and cross-process benchmarks of baton (see BENCHMARKS.md)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options every measuring subcommand takes.
#[derive(Args, Clone, Debug)]
struct Common {
    /// Store URL [default: a fresh SQLite file in a temporary directory, removed afterwards]
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// The baton binary, for `process` and `handoff` [default: `baton` next to this harness,
    /// i.e. target/release/baton]
    #[arg(long, value_name = "PATH")]
    baton: Option<PathBuf>,
    /// Print the results as one JSON object on stdout instead of a table
    #[arg(long)]
    json: bool,
}

/// How many keys, jobs and workers a jobs run has (`jobs-throughput`, `jobs-floor`).
#[derive(Args)]
struct JobsLoad {
    /// Keys the jobs are spread over, round-robin
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    keys: u32,
    /// No-op jobs, queued before the workers start (not timed)
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    jobs: u32,
    /// Workers: tasks of this process, each with its own store connection (as separate
    /// processes would have)
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    workers: u32,
    /// On PostgreSQL, no `VACUUM ANALYZE` of the database between queueing the jobs (not
    /// timed: baton's submits, or the floor's inserts into its table) and the timed run: the
    /// run then starts among the dead rows the queueing and earlier runs left
    #[arg(long)]
    no_vacuum: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Whole-process time of `baton run --store S k -- true` next to `flock FILE true` (on an
    /// etcd store: `etcdctl lock k true`)
    Process {
        #[command(flatten)]
        common: Common,
        /// Measured rounds (one baton run and one flock each, alternating which goes first)
        #[arg(long, default_value_t = 50, value_parser = rounds)]
        rounds: usize,
        /// Unmeasured rounds first (page cache, the store file's creation)
        #[arg(long, default_value_t = 5)]
        warmup: usize,
    },
    /// Handoff latency from this process's release to a waiting `baton run`'s command
    Handoff {
        #[command(flatten)]
        common: Common,
        /// Who waits: `baton run` (release to its command's start) or another process using
        /// the library (release to its `acquire` returning)
        #[arg(long, value_enum, default_value = "run")]
        waiter: handoff::Waiter,
        /// Pause between seeing the waiter queued and releasing, so that it is waiting (and
        /// subscribed to wake-ups) when the release comes; 0 releases at once
        #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
        settle: Duration,
        /// Measured handoffs
        #[arg(long, default_value_t = 50, value_parser = rounds)]
        rounds: usize,
        /// Unmeasured handoffs first
        #[arg(long, default_value_t = 3)]
        warmup: usize,
    },
    /// Acquire + release cycles through the library: one uncontended client, or with
    /// --processes N, N processes on one key
    Throughput {
        #[command(flatten)]
        common: Common,
        /// Measured cycles of the single uncontended client
        #[arg(long, default_value_t = 10_000)]
        cycles: usize,
        /// Unmeasured cycles first (warms the coordinator's cache and SQLite's statements)
        #[arg(long, default_value_t = 200)]
        warmup: usize,
        /// Run this many processes cycling on one key instead of one uncontended client
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
        processes: Option<u32>,
        /// Cycle baton's two writes replayed through the store instead (one real turn
        /// recorded first): the store's floor under the library's cycle, as in `peers`' B1
        #[arg(long, conflicts_with = "processes")]
        replay: bool,
        /// How long the processes cycle (with --processes)
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Store requests per waiter and minute: waiters queued behind a holder, by place
    Polling {
        #[command(flatten)]
        common: Common,
        /// Waiters queued behind the holder (places 0, 1, 2, …)
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
        waiters: u32,
        /// How long the waiters are measured
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Store calls per minute of N waiters on one key, directly next to through `baton serve`
    /// (an in-process server on loopback in front of the same store)
    ServePolling {
        #[command(flatten)]
        common: Common,
        /// Waiters queued behind the holder
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        waiters: u32,
        /// How long each way is measured
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// The server's `--poll`
        #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
        poll: Duration,
    },
    /// Acquire + release through `baton serve` next to direct, on the same store, alternating
    ServeOverhead {
        #[command(flatten)]
        common: Common,
        /// Measured cycles each way
        #[arg(long, default_value_t = 500, value_parser = rounds)]
        rounds: usize,
        /// Unmeasured cycles first
        #[arg(long, default_value_t = 50)]
        warmup: usize,
        /// Put the store this round trip away (a proxy on loopback delays its bytes), for the
        /// direct client and the server alike: a store over the network, as in most deployments
        #[arg(long, value_parser = humantime::parse_duration, value_name = "DUR")]
        store_rtt: Option<Duration>,
    },
    /// A release to a waiter's turn, both through one `baton serve`, next to both direct
    ServeHandoff {
        #[command(flatten)]
        common: Common,
        /// Measured handoffs each way
        #[arg(long, default_value_t = 50, value_parser = rounds)]
        rounds: usize,
        /// How long the waiter waits before the release
        #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
        settle: Duration,
    },
    /// How many idle waiters one `baton serve` holds, and their memory
    ServeIdle {
        #[command(flatten)]
        common: Common,
        /// Waiters
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        waiters: u32,
        /// Keys they are spread over (one holder each; a key's queue is bounded)
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        keys: u32,
        /// How long the holders hold (the run must end before)
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        hold: Duration,
    },
    /// Jobs per second through library workers, each key strictly one run at a time (checked:
    /// the run fails if two runs of a key overlap or its fences do not rise)
    JobsThroughput {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        load: JobsLoad,
        /// How long each job runs (a sleep while it holds its key): 0 is a no-op job, whose
        /// run is too short for the overlap check to see much
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        run_for: Duration,
        /// Keys under another prefix, each given one job before the measured ones, that no
        /// worker of the run serves (a pool whose workers are down): every look at the due
        /// index meets them first. Claimed and completed after the run, not timed
        #[arg(
            long,
            value_name = "N",
            default_value_t = 0,
            value_parser = clap::value_parser!(u32).range(0..=1_000_000)
        )]
        due_elsewhere: u32,
    },
    /// The floor under `jobs-throughput` on PostgreSQL: one row per key, a look at the due
    /// index, a claim by CAS and a completion by CAS per job, and nothing else
    JobsFloor {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        load: JobsLoad,
    },
    /// The floor under B3: a first-come lock in a SQLite file (or PostgreSQL's rows, Redis's
    /// lists, etcd's keys) whose releaser tells the next in line, N clients on one key against
    /// one alone, in alternating rounds
    HotFloor {
        /// Print the results as one JSON object on stdout instead of a table
        #[arg(long)]
        json: bool,
        /// Run on this PostgreSQL (tables and functions of its own, made again) instead of a
        /// fresh SQLite file
        #[arg(long, value_name = "URL", conflicts_with_all = ["redis", "etcd"])]
        postgres: Option<String>,
        /// Run on this Redis (keys of its own under `baton-bench-hot-floor/`, cleared first)
        /// instead of a fresh SQLite file
        #[arg(long, value_name = "URL", conflicts_with = "etcd")]
        redis: Option<String>,
        /// Run on this etcd (`etcd://HOST:PORT/…`; keys of its own under
        /// `baton-bench-hot-floor/`, removed at the end) instead of a fresh SQLite file
        #[arg(long, value_name = "URL")]
        etcd: Option<String>,
        /// With --etcd: keep the queue as baton keeps a key, in one etcd key written by
        /// compare-and-swap (a write that lost tries again at once from the document it read),
        /// instead of a key per entry
        #[arg(long, requires = "etcd")]
        one_document: bool,
        /// With --etcd: keep the queue in one etcd key as --one-document does, but let a client
        /// that finds the key held enqueue by putting an arrival beside it (a key of its own, no
        /// compare), which the holder's release takes in
        #[arg(long, requires = "etcd", conflicts_with = "one_document")]
        arrivals: bool,
        /// With --arrivals: clients watch the document alone, and the holder reads the arrivals
        /// (with the document) before its release, instead of every client watching them
        #[arg(long, requires = "arrivals")]
        read_arrivals: bool,
        /// With --arrivals: this many bytes of filler in every write of the document, as
        /// baton's tickets make its document kilobytes where the floor's is a few places (every
        /// write is sent to every client's watch)
        #[arg(long, requires = "arrivals", default_value_t = 0, value_name = "BYTES",
              value_parser = clap::value_parser!(u32).range(0..=262_144))]
        pad_document: u32,
        /// Clients (threads, each with its own connection) on the hot key
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(2..=256))]
        clients: u32,
        /// Rounds of each (one client alone, then all of them, alternating which goes first)
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
        rounds: u32,
        /// How long each round lasts
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// Claim latency of an idle library worker: from just before a submit to its claim
    JobsLatency {
        #[command(flatten)]
        common: Common,
        /// Measured rounds (one job each, completed before the next is submitted)
        #[arg(long, default_value_t = 50, value_parser = rounds)]
        rounds: usize,
        /// Unmeasured rounds first
        #[arg(long, default_value_t = 3)]
        warmup: usize,
        /// How often the idle worker looks for jobs when nothing wakes it (`baton worker`'s
        /// default); on a store that cannot push, the latency follows it
        #[arg(long, default_value = "1s", value_parser = poll)]
        poll: Duration,
        /// Submit each round's job to a key no job has been on (else all go to one key)
        #[arg(long)]
        new_key_each_round: bool,
    },
    /// An idle library worker's store calls per minute and a fresh job's claim latency, next to
    /// keys whose jobs are done and keys with jobs ready only in an hour
    JobsIdle {
        #[command(flatten)]
        common: Common,
        /// Keys given one job each, claimed and completed before the measurement
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
        idle_keys: u32,
        /// Keys with one job queued that is ready only in an hour
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        ready_keys: u32,
        /// How long the idle worker is measured
        #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// How often the idle worker looks for jobs when nothing wakes it
        #[arg(long, default_value = "1s", value_parser = poll)]
        poll: Duration,
        /// Measured claims of a fresh job afterwards (as `jobs-latency`)
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        latency_rounds: u32,
    },
    /// A submit's latency to a key with a deep backlog of queued jobs, next to one to an empty
    /// key
    JobsBacklog {
        #[command(flatten)]
        common: Common,
        /// Jobs queued on the deep key first (not measured)
        #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(0..=10_000_000))]
        queued: u32,
        /// Measured rounds (a submit to each key per round)
        #[arg(long, default_value_t = 200, value_parser = rounds)]
        rounds: usize,
    },
    /// Acquire + release of a key whose notification rule's receiver is down, next to a key
    /// no rule watches, alternating
    NotifyOverhead {
        #[command(flatten)]
        common: Common,
        /// Measured cycles of each key
        #[arg(long, default_value_t = 2000, value_parser = rounds)]
        rounds: usize,
        /// Unmeasured cycles first (the watched key's undelivered events reach their bound)
        #[arg(long, default_value_t = 200)]
        warmup: usize,
        /// The rule's events (a comma list, as `baton notify add --on`); the default, every
        /// event but `waited`, records two per cycle, the most an acquire + release can
        #[arg(
            long,
            default_value = "granted,released,failed,recovered,expired,superseded,cancelled,dead"
        )]
        on: String,
    },
    /// `kv set` and `kv get` latency through the library
    Kv {
        #[command(flatten)]
        common: Common,
        /// Measured rounds (one set and one get each)
        #[arg(long, default_value_t = 200, value_parser = rounds)]
        rounds: usize,
        /// Unmeasured rounds first
        #[arg(long, default_value_t = 10)]
        warmup: usize,
    },
    /// baton next to the peers users would otherwise use, on the same stores in alternating
    /// rounds: a Markdown table of medians, p99s, ratios and goals (scripts/bench-peers.sh
    /// starts the servers and runs it). Exits 3 when a goal is not met, 1 on an error
    Peers(Box<peers::PeersArgs>),
    /// Holds a key through a peer until killed (B5's holder, started by `peers`)
    #[command(hide = true)]
    PeerHold {
        /// The peer, as JSON
        #[arg(long)]
        spec: String,
        #[arg(long)]
        key: String,
    },
    /// Writes the current CLOCK_REALTIME in ns to FILE (the handoff's waiting command)
    #[command(hide = true)]
    Stamp { file: PathBuf },
    /// The `handoff --waiter library` process: acquire, stamp, release
    #[command(hide = true)]
    GrantStamp {
        #[arg(long)]
        store: String,
        key: String,
        file: PathBuf,
    },
    /// One process of `throughput --processes` (started by the harness)
    #[command(hide = true)]
    Worker(throughput::WorkerArgs),
}

fn rounds(text: &str) -> Result<usize, String> {
    let n: usize = text.parse().map_err(|e| format!("{e}"))?;
    if n < MIN_ROUNDS {
        return Err(format!(
            "at least {MIN_ROUNDS} rounds, or the p90 and p99 say little"
        ));
    }
    Ok(n)
}

/// A poll interval: at least 10 ms, as `baton worker --poll` takes (a shorter one would have
/// an idle worker spin on the store).
fn poll(text: &str) -> Result<Duration, String> {
    let poll = humantime::parse_duration(text).map_err(|e| format!("{e}"))?;
    if poll < Duration::from_millis(10) {
        return Err("at least 10ms".into());
    }
    Ok(poll)
}

fn main() {
    // First thing, before parsing arguments or starting a runtime: for `stamp` this reading is
    // the moment the waiting command started, which is what the handoff measures.
    let started_ns = setup::realtime_ns();
    let cli = Cli::parse();
    if let Err(error) = run(cli, started_ns) {
        errln!("baton-bench: {error:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli, started_ns: u128) -> Result<()> {
    if let Command::Stamp { file } = &cli.command {
        return std::fs::write(file, started_ns.to_string())
            .with_context(|| format!("cannot write the stamp to {}", file.display()));
    }
    // Two workers, as the `baton` CLI's long-running commands (`serve`, `worker`, `keep`) run
    // with; its one-shot commands run on one thread. Redis's B1 came out the same on either
    // (BENCHMARKS.md), and the harness runs many clients at once, as a server does.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start a tokio runtime")?;
    runtime.block_on(dispatch(cli.command))
}

async fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Process {
            common,
            rounds,
            warmup,
        } => {
            let report = process::run(&common, rounds, warmup).await?;
            output(&common, &report, process::print)
        }
        Command::Handoff {
            common,
            waiter,
            settle,
            rounds,
            warmup,
        } => {
            let report = handoff::run(&common, waiter, settle, rounds, warmup).await?;
            output(&common, &report, handoff::print)
        }
        Command::Throughput {
            common,
            cycles,
            warmup,
            processes: None,
            replay,
            ..
        } => {
            let report = throughput::single(&common, cycles, warmup, replay).await?;
            output(&common, &report, throughput::print_single)
        }
        Command::Throughput {
            common,
            processes: Some(processes),
            duration,
            ..
        } => {
            let report = throughput::many(&common, processes, duration).await?;
            let exclusive = report.duplicate_fences.is_empty() && report.overlaps.is_empty();
            output(&common, &report, throughput::print_many)?;
            anyhow::ensure!(exclusive, "mutual exclusion was violated (see above)");
            anyhow::ensure!(
                report.n_failures == 0,
                "{} operations failed (see above)",
                report.n_failures
            );
            Ok(())
        }
        Command::Polling {
            common,
            waiters,
            duration,
        } => {
            let report = polling::run(&common, waiters as usize, duration).await?;
            output(&common, &report, polling::print)
        }
        Command::ServeOverhead {
            common,
            rounds,
            warmup,
            store_rtt,
        } => {
            let report = serve_bench::overhead(&common, rounds, warmup, store_rtt).await?;
            output(&common, &report, serve_bench::print_overhead)
        }
        Command::ServeHandoff {
            common,
            rounds,
            settle,
        } => {
            let report = serve_bench::handoff(&common, rounds, settle).await?;
            output(&common, &report, serve_bench::print_handoff)
        }
        Command::ServeIdle {
            common,
            waiters,
            keys,
            hold,
        } => {
            let report = serve_bench::idle(&common, waiters as usize, keys as usize, hold).await?;
            output(&common, &report, serve_bench::print_idle)
        }
        Command::ServePolling {
            common,
            waiters,
            duration,
            poll,
        } => {
            let report = serve_polling::run(&common, waiters as usize, duration, poll).await?;
            output(&common, &report, serve_polling::print)
        }
        Command::JobsThroughput {
            common,
            load,
            run_for,
            due_elsewhere,
        } => {
            let report = jobs::throughput(
                &common,
                load.keys as usize,
                load.jobs as usize,
                load.workers as usize,
                run_for,
                !load.no_vacuum,
                due_elsewhere as usize,
            )
            .await?;
            output(&common, &report, jobs::print_throughput)?;
            anyhow::ensure!(
                report.serialised(),
                "strict per-key serialisation was violated (see above)"
            );
            anyhow::ensure!(
                report.n_failures == 0,
                "{} operations failed (see above)",
                report.n_failures
            );
            Ok(())
        }
        Command::JobsFloor { common, load } => {
            let Some(url) = common.store.as_deref() else {
                anyhow::bail!("jobs-floor runs on PostgreSQL: give --store postgres://…");
            };
            let (keys, jobs, workers) = (load.keys as usize, load.jobs as usize, load.workers);
            let vacuum = !load.no_vacuum;
            let report = jobs_floor::floor(url, keys, jobs, workers as usize, vacuum).await?;
            output(&common, &report, jobs_floor::print_floor)
        }
        Command::HotFloor {
            json,
            postgres,
            redis,
            etcd,
            one_document,
            arrivals,
            read_arrivals,
            pad_document,
            clients,
            rounds,
            duration,
        } => {
            let common = Common {
                store: None,
                baton: None,
                json,
            };
            let (clients, rounds) = (clients as usize, rounds as usize);
            let on = match (postgres, redis, etcd) {
                (Some(url), _, _) => hot_floor::On::Postgres(url),
                (None, Some(url), _) => hot_floor::On::Redis(url),
                (None, None, Some(url)) if one_document => hot_floor::On::EtcdDocument(url),
                (None, None, Some(url)) if arrivals => hot_floor::On::EtcdArrivals {
                    url,
                    reads: read_arrivals,
                    pad: pad_document as usize,
                },
                (None, None, Some(url)) => hot_floor::On::Etcd(url),
                (None, None, None) => hot_floor::On::Sqlite,
            };
            let report = hot_floor::run(on, clients, rounds, duration).await?;
            output(&common, &report, hot_floor::print)
        }
        Command::JobsLatency {
            common,
            rounds,
            warmup,
            poll,
            new_key_each_round,
        } => {
            let report = jobs::latency(&common, rounds, warmup, poll, new_key_each_round).await?;
            output(&common, &report, jobs::print_latency)
        }
        Command::JobsIdle {
            common,
            idle_keys,
            ready_keys,
            duration,
            poll,
            latency_rounds,
        } => {
            let report = jobs::idle(
                &common,
                idle_keys as usize,
                ready_keys as usize,
                duration,
                poll,
                latency_rounds as usize,
            )
            .await?;
            output(&common, &report, jobs::print_idle)
        }
        Command::JobsBacklog {
            common,
            queued,
            rounds,
        } => {
            let report = backlog::backlog(&common, queued as usize, rounds).await?;
            output(&common, &report, backlog::print_backlog)
        }
        Command::NotifyOverhead {
            common,
            rounds,
            warmup,
            on,
        } => {
            let report = notify_kv::notify_overhead(&common, rounds, warmup, &on).await?;
            output(&common, &report, notify_kv::print_notify)
        }
        Command::Kv {
            common,
            rounds,
            warmup,
        } => {
            let report = notify_kv::kv_latency(&common, rounds, warmup).await?;
            output(&common, &report, notify_kv::print_kv)
        }
        Command::Peers(args) => {
            let report = peers::run(&args).await?;
            output(&args.common, &report, peers::print)?;
            if !peers::goals_met(&report) {
                errln!("baton-bench: some goals were not met (see the table)");
                std::process::exit(GOALS_NOT_MET);
            }
            Ok(())
        }
        Command::PeerHold { spec, key } => {
            let spec: peers::Spec =
                serde_json::from_str(&spec).context("--spec is not a peer's description")?;
            peers::takeover::hold(&spec, &key).await
        }
        Command::Worker(args) => throughput::worker(args).await,
        Command::GrantStamp { store, key, file } => handoff::grant_stamp(&store, &key, &file).await,
        Command::Stamp { .. } => unreachable!("handled before the runtime starts"),
    }
}

/// Prints `report` as a table or, with `--json`, as JSON.
fn output<T: serde::Serialize>(
    common: &Common,
    report: &T,
    table: fn(&T, &mut String),
) -> Result<()> {
    let mut text = String::new();
    if common.json {
        text = serde_json::to_string_pretty(report).context("cannot encode the report")?;
        text.push('\n');
    } else {
        table(report, &mut text);
    }
    write_stdout(&text)
}

/// Writes `text` to standard output. A reader gone (`baton-bench … | head`) is the end of the
/// output, as for any Unix filter, not an error: the run's exit status stays what it would have
/// been (`peers` still says whether its goals were met).
fn write_stdout(text: &str) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written.context("cannot write to standard output"),
    }
}
