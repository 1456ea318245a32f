//! `baton-torture`: real baton clients taking turns at a protected resource while faults hit
//! them, and the checker's verdict on what the resource and the store recorded.
//!
//! - `run` serves the resource, runs the clients and the seeded faults, sweeps the dead
//!   tickets, checks everything and prints a summary (`--json` for scripts). Exit status 0: no
//!   violation; 1: violations (listed); 2: the run itself could not be made.
//! - `use` is the protected work `baton run` starts (it reads `BATON_FENCE`).
//! - `lib-client` is one turn through the library.
//! - `turns-client` is one turn through `baton serve`'s turns API, the one rule kept here.

mod harness;
mod kept_client;
mod kv_client;
mod library;
mod matrix;
mod serve;
mod turns_client;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use baton_client::poll::PollBounds;
use baton_torture::faults::Fault;
use baton_torture::work::{HoldEnd, Session};
use baton_torture::work_checker::{job_ticket, Behaviour};
use clap::{Parser, Subcommand};
use harness::{ClientKind, Config, Kind, Work};

#[derive(Parser)]
#[command(
    name = "baton-torture",
    about = "Real baton clients under faults at a protected resource, checked for violations",
    after_help = "Examples:\n  \
        baton-torture run --store sqlite:/tmp/t.db --clients 6 --rounds 10 --kind semaphore --limit 2\n  \
        baton-torture run --store \"$BATON_TEST_REDIS_URL\" --duration 60s --client mixed \\\n      \
        --faults kill-holder,kill-waiter,pause-holder,restart \\\n      \
        --restart-cmd 'scripts/restart-server.sh redis --kill' --seed 7"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the resource, run the clients under faults, check the records.
    Run(Box<RunArgs>),
    /// The protected work, run by `baton run` or `baton worker` (reads BATON_FENCE, and
    /// BATON_TICKET or BATON_JOB_TOKEN).
    Use(UseArgs),
    /// One turn through the library: acquire with a heartbeat, the work, release.
    LibClient(LibArgs),
    /// One turn as a CI job's steps take it: `baton acquire --keep-alive`, the work, `baton
    /// release`.
    KeptClient(KeptArgs),
    /// One turn through `baton serve`'s turns API (as the clients of other languages take it),
    /// then the work of `use`.
    TurnsClient(TurnsArgs),
    /// Every store in the environment (scripts/with-servers.sh) under its faults, one run
    /// each, then the summary table.
    Matrix(MatrixArgs),
    /// The summary table of run summaries (`run --json` lines) read from stdin.
    Table,
    /// The protected resource alone, every key a mutex: prints its address, serves until
    /// stdin closes, then prints its verdict as JSON (exit 1 on a violation or a refused write).
    Resource,
    /// One increment of a shared value through the library: append --who to the value by
    /// compare-and-swap (exit 0 landed, 5 unknown after a lost answer, 2 failed).
    KvClient(KvArgs),
}

#[derive(clap::Args)]
struct KvArgs {
    /// The store URL.
    #[arg(long)]
    store: String,
    /// The value's name.
    #[arg(long)]
    name: String,
    /// This process's name, appended to the value.
    #[arg(long)]
    who: String,
}

#[derive(clap::Args)]
struct MatrixArgs {
    /// How long each run lasts.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// The first run's seed (each next run adds one).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The baton binary (default: next to this one).
    #[arg(long)]
    baton: Option<PathBuf>,
    /// scripts/restart-server.sh (default: found from the current directory upwards).
    #[arg(long)]
    restart_script: Option<PathBuf>,
    /// Only the runs on these stores (URL schemes: sqlite, postgres, redis, etcd, s3,
    /// dynamodb, and http for two `baton serve`), comma-separated.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Which work to torture on each store: `locks` (the lock runs), `work` (one run per store
    /// of jobs, run-once keys and shared values at once), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "locks,work")]
    work: Vec<String>,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The store URL every client uses.
    #[arg(long)]
    store: String,
    /// The baton binary (default: next to this one).
    #[arg(long)]
    baton: Option<PathBuf>,
    /// Client threads, each running client processes one after another.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Turns (processes) per client, unless --duration is given.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Run for this long instead of a number of rounds (each client finishes its turn).
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// What the keys are.
    #[arg(long, value_enum, default_value = "mutex")]
    kind: Kind,
    /// How many keys the clients share (KEY/k0, KEY/k1, …; each turn takes one in turn).
    #[arg(long, default_value_t = 1)]
    keys: usize,
    /// The semaphore's limit.
    #[arg(long, default_value_t = 2)]
    limit: u32,
    /// How long each holder uses the resource (writing every 10 ms).
    #[arg(long, default_value = "50ms", value_parser = humantime::parse_duration)]
    hold: Duration,
    /// Which client the processes are.
    #[arg(long, value_enum, default_value = "cli")]
    client: ClientKind,
    /// The lease TTL the clients ask for (short, so that faults show within a short run).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// The waiter TTL the clients ask for.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    waiter_ttl: Duration,
    /// The clients' shortest poll interval.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    poll_min: Duration,
    /// The clients' longest poll interval (the claim window is twice this plus 2 s).
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration)]
    poll_max: Duration,
    /// The seed of the fault schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The faults to inject, comma-separated (none: a quiet run).
    #[arg(long, value_enum, value_delimiter = ',')]
    faults: Vec<Fault>,
    /// About how often a fault is injected.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    every: Duration,
    /// How long a proxy black hole lasts (default: the TTL and a second, so leases run out).
    #[arg(long, value_parser = humantime::parse_duration)]
    hole: Option<Duration>,
    /// The shell command that restarts the store's server (the restart fault).
    #[arg(long)]
    restart_cmd: Option<String>,
    /// Run one client in three with its wall clock this far ahead and one this far behind
    /// (faketime; monotonic clocks untouched).
    #[arg(long, value_parser = humantime::parse_duration)]
    skew: Option<Duration>,
    /// Added to the takeover bound for starting processes on a loaded machine.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    takeover_slack: Duration,
    /// What the clients do: take turns at keys (`locks`), or the work half: job workers with a
    /// submitter (`jobs`), `baton once` callers (`once`), shared-value increments (`kv`), or
    /// the three at once, clients dealt round (`all`).
    #[arg(long, value_enum, default_value = "locks")]
    work: Work,
    /// The key (default: a fresh one, so runs on a shared store never meet).
    #[arg(long)]
    key: Option<String>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
    /// Run the clients' work WITHOUT baton (a self-test: the checker must then report
    /// violations, or it could not catch a broken lock either).
    #[arg(long)]
    unprotected: bool,
    /// Library clients read the key first and enqueue by arrival (beside the document) when
    /// they saw it held, on a store that keeps arrivals (etcd, Redis)
    #[arg(long)]
    by_arrival: bool,
}

#[derive(clap::Args)]
struct UseArgs {
    /// The resource's address (host:port).
    #[arg(long)]
    resource: String,
    /// The key being used (default: BATON_KEY, as `baton worker` sets it).
    #[arg(long)]
    key: Option<String>,
    /// This client process's name (`cC-rR`).
    #[arg(long)]
    who: String,
    /// Hold as a shared holder.
    #[arg(long)]
    shared: bool,
    /// How long to use it.
    #[arg(long, value_parser = humantime::parse_duration)]
    hold: Duration,
    /// After the hold, exit 1 one time in N (a flaky command), at random.
    #[arg(long)]
    fail_one_in: Option<u32>,
}

/// `kept-client` does the same work as `use`, between `baton acquire --keep-alive` and `baton
/// release`.
#[derive(clap::Args)]
struct KeptArgs {
    #[command(flatten)]
    work: UseArgs,
    /// The `baton` binary.
    #[arg(long)]
    baton: PathBuf,
    #[arg(long)]
    store: String,
    /// `baton acquire`'s own flags, after `--`.
    #[arg(last = true)]
    acquire: Vec<String>,
}

/// `turns-client` does the same work as `use`, taking the turn through `baton serve`'s turns
/// API and keeping the one rule itself.
#[derive(clap::Args)]
struct TurnsArgs {
    #[command(flatten)]
    work: UseArgs,
    /// The servers: `http://HOST:PORT[,HOST:PORT…]`.
    #[arg(long)]
    store: String,
    #[arg(long, value_parser = humantime::parse_duration)]
    ttl: Duration,
    #[arg(long, value_parser = humantime::parse_duration)]
    waiter_ttl: Duration,
}

/// `lib-client` does the same work as `use`, after taking the turn itself.
#[derive(clap::Args)]
struct LibArgs {
    #[command(flatten)]
    work: UseArgs,
    #[arg(long)]
    store: String,
    #[arg(long, value_parser = humantime::parse_duration)]
    ttl: Duration,
    #[arg(long, value_parser = humantime::parse_duration)]
    waiter_ttl: Duration,
    #[arg(long, value_parser = humantime::parse_duration)]
    poll_min: Duration,
    #[arg(long, value_parser = humantime::parse_duration)]
    poll_max: Duration,
    #[arg(long, default_value_t = 1)]
    limit: u32,
    /// A pool's slots, comma-separated (the limit is their number).
    #[arg(long, value_delimiter = ',')]
    slots: Vec<String>,
    /// Read the key first, and enqueue by arrival if it was held.
    #[arg(long)]
    by_arrival: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run(args) => run(*args),
        Cmd::Use(args) => use_resource(args),
        Cmd::LibClient(args) => lib_client(args),
        Cmd::TurnsClient(args) => turns_client::run(&turns_client::Turns {
            store: &args.store,
            key: args.work.key.as_deref().unwrap_or_default(),
            who: &args.work.who,
            resource: &args.work.resource,
            shared: args.work.shared,
            hold: args.work.hold,
            ttl: args.ttl,
            waiter_ttl: args.waiter_ttl,
        }),
        Cmd::KeptClient(args) => kept_client::run(&kept_client::Kept {
            baton: &args.baton,
            store: &args.store,
            key: args.work.key.as_deref().unwrap_or_default(),
            who: &args.work.who,
            resource: &args.work.resource,
            shared: args.work.shared,
            hold: args.work.hold,
            acquire: &args.acquire,
        }),
        Cmd::Matrix(args) => matrix(args),
        Cmd::Table => table(),
        Cmd::Resource => serve::resource(),
        Cmd::KvClient(args) => kv_client::run(&args.store, &args.name, &args.who),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("baton-torture: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: RunArgs) -> Result<ExitCode, String> {
    let own = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let baton = baton_next_to_me(args.baton)?;
    let key = args.key.unwrap_or_else(|| {
        format!(
            "torture/{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        )
    });
    let config = Config {
        store: args.store,
        baton,
        own,
        clients: args.clients,
        rounds: args.rounds,
        duration: args.duration,
        kind: args.kind,
        keys: args.keys,
        limit: args.limit,
        hold: args.hold,
        client: args.client,
        ttl: args.ttl,
        waiter_ttl: args.waiter_ttl,
        poll_min: args.poll_min,
        poll_max: args.poll_max,
        seed: args.seed,
        faults: args.faults,
        every: args.every,
        hole: args.hole.unwrap_or(args.ttl + Duration::from_secs(1)),
        restart_cmd: args.restart_cmd,
        skew: args.skew,
        takeover_slack: args.takeover_slack,
        key,
        unprotected: args.unprotected,
        work: args.work,
        by_arrival: args.by_arrival,
    };
    let verdict = harness::run(&config)?;
    if args.json {
        println!("{}", verdict.summary);
    } else {
        let s = &verdict.summary;
        println!("store:       {}", s["store"].as_str().unwrap_or_default());
        println!("key:         {}", s["key"].as_str().unwrap_or_default());
        println!(
            "run:         {} {} clients, seed {}, faults {}",
            s["kind"].as_str().unwrap_or_default(),
            s["client"].as_str().unwrap_or_default(),
            s["seed"],
            s["faults"]
        );
        println!("turns:       {} {}", s["turns"], s["exits"]);
        println!(
            "holds:       {} accepted ({} writes), {} writes fenced off",
            s["holds"], s["writes"], s["fenced_off"]
        );
        println!("injected:    {}", s["injected"]);
        println!("takeover ms: {}", s["takeover_ms"]);
        println!("queues:      {}", s["queues"]);
        println!("lost:        {}", s["lost"]);
        println!("log:         {}", s["log"].as_str().unwrap_or_default());
    }
    // Always on stderr, so `--json` stays one object on stdout.
    eprintln!("violations:  {}", verdict.violations.len());
    for violation in &verdict.violations {
        eprintln!("  {violation:?}");
    }
    if !args.json {
        println!("violations:  {}", verdict.violations.len());
    }
    Ok(if verdict.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The protected work under `baton run`, `baton once` or `baton worker`: hold with the fence
/// it was given (on a pool, at the slot it was given). Exit 3 when the resource refuses a write (fenced off). Under a worker the hold
/// is named by the job's run (`ID.ATTEMPT.FENCE`) and the exit status is what the job's
/// parameters say its behaviour is on this attempt; `--fail-one-in N` fails one time in N.
fn use_resource(args: UseArgs) -> Result<ExitCode, String> {
    let var = |name: &str| std::env::var(name).ok();
    let fence: u64 = var("BATON_FENCE")
        .ok_or("BATON_FENCE is not set: run me under `baton run`")?
        .parse()
        .map_err(|e| format!("BATON_FENCE is not a number: {e}"))?;
    let key = args
        .key
        .or_else(|| var("BATON_KEY"))
        .ok_or("no --key, and BATON_KEY is not set")?;
    let job = job_run(fence)?;
    // `baton run` gives its command the ticket's secret token, `baton worker` its job run's:
    // unique to this turn.
    let ticket = match &job {
        Some((ticket, _)) => ticket.clone(),
        None => var("BATON_TICKET").or_else(|| var("BATON_JOB_TOKEN")).ok_or(
            "neither BATON_TICKET nor BATON_JOB_TOKEN is set: run me under `baton run` or `baton worker`",
        )?,
    };
    // On a pool, the slot `baton run` gave is the resource.
    let key = match var("BATON_SLOT") {
        Some(slot) => baton_torture::slot_resource(&key, &slot),
        None => key,
    };
    let mut session = Session::connect(&args.resource, &args.who)?;
    match session.hold(&key, &ticket, fence, args.shared, args.hold, || false)? {
        HoldEnd::Done | HoldEnd::Stopped => {}
        HoldEnd::FencedOff(why) => {
            eprintln!("baton-torture use ({}): the resource said {why}", args.who);
            return Ok(ExitCode::from(3));
        }
    }
    let flaky = args
        .fail_one_in
        .is_some_and(|n| rand::random_range(0..n.max(1)) == 0);
    Ok(match job {
        Some((_, code)) => ExitCode::from(code),
        None if flaky => ExitCode::from(1),
        None => ExitCode::SUCCESS,
    })
}

/// Under `baton worker`: the resource ticket of this run and the exit status its job's
/// behaviour (its parameters, a JSON string naming one) gives on this attempt, 0 when they name
/// none (a script around `use` decides then). `None` elsewhere.
fn job_run(fence: u64) -> Result<Option<(String, u8)>, String> {
    let Ok(id) = std::env::var("BATON_JOB_ID") else {
        return Ok(None);
    };
    let attempt: u32 = std::env::var("BATON_ATTEMPT")
        .map_err(|_| "BATON_JOB_ID without BATON_ATTEMPT")?
        .parse()
        .map_err(|e| format!("BATON_ATTEMPT is not a number: {e}"))?;
    let params = std::env::var("BATON_PARAMS").unwrap_or_default();
    let code = serde_json::from_str::<String>(&params)
        .ok()
        .and_then(|name| Behaviour::from_name(&name))
        .map_or(0, |behaviour| behaviour.exit_code(attempt));
    Ok(Some((job_ticket(&id, attempt, fence), code)))
}

fn baton_next_to_me(given: Option<PathBuf>) -> Result<PathBuf, String> {
    let own = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let baton = given.unwrap_or_else(|| own.with_file_name("baton"));
    if !baton.is_file() {
        return Err(format!(
            "no baton binary at {}: build it (`cargo build -p baton-cli`) or pass --baton",
            baton.display()
        ));
    }
    Ok(baton)
}

fn matrix(args: MatrixArgs) -> Result<ExitCode, String> {
    let baton = baton_next_to_me(args.baton)?;
    let restart = match args.restart_script {
        Some(path) => path,
        None => {
            let here = std::env::current_dir().map_err(|e| format!("no current directory: {e}"))?;
            here.ancestors()
                .map(|dir| dir.join("scripts/restart-server.sh"))
                .find(|path| path.is_file())
                .ok_or(
                    "cannot find scripts/restart-server.sh above the current directory: \
                        pass --restart-script",
                )?
        }
    };
    let clean = matrix::run(
        baton,
        args.duration,
        args.seed,
        &restart,
        &args.only,
        &args.work,
    )?;
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn table() -> Result<ExitCode, String> {
    let mut summaries = Vec::new();
    for line in std::io::stdin().lines() {
        let line = line.map_err(|e| format!("cannot read stdin: {e}"))?;
        if line.trim_start().starts_with('{') {
            summaries
                .push(serde_json::from_str(&line).map_err(|e| format!("not a run summary: {e}"))?);
        }
    }
    print!("{}", matrix::table(&summaries));
    Ok(ExitCode::SUCCESS)
}

fn lib_client(args: LibArgs) -> Result<ExitCode, String> {
    let poll = PollBounds {
        min: args.poll_min,
        max: args.poll_max,
    };
    library::run(library::Turn {
        store: args.store,
        key: args.work.key.ok_or("lib-client needs --key")?,
        limit: args.limit,
        slots: args.slots,
        shared: args.work.shared,
        who: args.work.who,
        resource: args.work.resource,
        hold: args.work.hold,
        ttl: args.ttl,
        waiter_ttl: args.waiter_ttl,
        poll,
        by_arrival: args.by_arrival,
    })
}
