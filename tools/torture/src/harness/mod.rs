//! `baton-torture run`: clients taking turns at the protected resource while faults hit them,
//! then the checker's verdict.
//!
//! The harness serves the [`Resource`] on a loopback port and runs `--clients` threads, each
//! starting one client process after another: `baton run KEY -- baton-torture use …` (the CLI)
//! or `baton-torture lib-client …` (the library). A fault thread follows the seeded
//! [`Schedule`]. When the clients are done, the faults stop, the dead tickets are swept (a
//! `baton run` that waits until every one of them has lapsed), and the checker reads the
//! resource's records, the key's history (`baton log --json`) and what is still live
//! (`baton status --json`).

//!
//! - [`clients`]: how each client thread starts its processes (CLI or library, skewed or not,
//!   through the fault proxy or not).
//! - [`injector`]: the fault thread.
//! - [`sampler`]: how long the queues grew.
//! - [`verdict`]: the sweep, the history read back, and the takeover times.

mod clients;
mod durable;
mod injector;
mod jobs;
mod sampler;
mod verdict;
mod work_verdict;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use baton_torture::checker::Violation;
use baton_torture::checker::{check_history, check_intervals, Ending, KeySpec, Process};
use baton_torture::faults::{Fault, Schedule};
use baton_torture::resource::Resource;
use baton_torture::Interval;
use serde_json::json;
use serde_json::Value;

use clients::{ClientPlan, ProxiedStore};
use injector::Injector;
use verdict::{sweep, takeovers};

/// What a key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// One holder at a time; fences must rise.
    Mutex,
    /// Up to --limit holders at once.
    Semaphore,
    /// Every client shared except one in three, which is normal: shared never beside normal.
    Shared,
    /// A pool of --limit named slots (`--slots s0,s1,…`): each turn takes any free one, and
    /// each slot is a resource of its own that refuses a second writer and a stale fence.
    Pool,
    /// With --keys 3 or more: a mutex, a semaphore, a shared key and a pool, and so on in
    /// turn.
    Mixed,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Semaphore => "semaphore",
            Kind::Shared => "shared",
            Kind::Pool => "pool",
            Kind::Mixed => "mixed",
        }
    }
}

/// One key of a run: its name and what it is (never `Mixed`).
#[derive(Clone, Debug)]
pub struct KeyPlan {
    pub name: String,
    pub kind: Kind,
    /// The key's limit (1 but for a semaphore and a pool).
    pub limit: u32,
    /// A pool's slots (empty but for a pool).
    pub slots: Vec<String>,
}

impl KeyPlan {
    fn spec(&self) -> KeySpec {
        KeySpec {
            limit: self.limit,
            fenced: self.kind == Kind::Mutex,
        }
    }

    /// Whether a holder that outlives its lease meets a fence at the resource: a mutex's, or
    /// the slot's of a pool.
    fn fenced(&self) -> bool {
        matches!(self.kind, Kind::Mutex | Kind::Pool)
    }

    /// What the resource serves for this key, and whether it checks fences there: the key, or
    /// each slot of a pool (one writer at a time, fenced).
    fn resources(&self) -> Vec<(String, KeySpec)> {
        if self.slots.is_empty() {
            return vec![(self.name.clone(), self.spec())];
        }
        let slot = KeySpec {
            limit: 1,
            fenced: true,
        };
        self.slots
            .iter()
            .map(|s| (baton_torture::slot_resource(&self.name, s), slot))
            .collect()
    }

    /// The flags that make a turn's ticket agree with the key: `--limit N`, or a pool's
    /// `--slots s0,s1,…`.
    fn shape_flags(&self) -> [String; 2] {
        if self.slots.is_empty() {
            ["--limit".to_owned(), self.limit.to_string()]
        } else {
            ["--slots".to_owned(), self.slots.join(",")]
        }
    }
}

/// What the clients do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Work {
    /// Take turns at keys (`baton run`, the library).
    Locks,
    /// `baton worker` processes running the jobs a submitter queues, resubmits under their
    /// ids and retries once dead.
    Jobs,
    /// `baton once` callers of a flaky command.
    Once,
    /// Compare-and-swap increments of shared values.
    Kv,
    /// Jobs, once and kv at once, dealt round the clients.
    All,
}

impl Work {
    pub fn name(self) -> &'static str {
        match self {
            Work::Locks => "locks",
            Work::Jobs => "jobs",
            Work::Once => "once",
            Work::Kv => "kv",
            Work::All => "all",
        }
    }

    /// What client `c` does.
    fn of_client(self, c: usize) -> Work {
        match self {
            Work::All => [Work::Jobs, Work::Once, Work::Kv][c % 3],
            work => work,
        }
    }

    /// What a client of this work works on for key `k` of the run's `key` (`{epoch}`: the
    /// current epoch's); `None` for locks, which take the key itself.
    fn subject(self, key: &str, k: usize) -> Option<String> {
        match self {
            Work::Locks | Work::All => None,
            // Every worker serves every job key of the run.
            Work::Jobs => Some(format!("{key}/jobs/")),
            Work::Once => Some(format!("{key}/once/k{k}-e{{epoch}}")),
            Work::Kv => Some(format!("{key}/kv/k{k}-e{{epoch}}")),
        }
    }

    /// Whether some client of this run runs job workers.
    fn has_jobs(self) -> bool {
        matches!(self, Work::Jobs | Work::All)
    }
}

/// Which client the processes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientKind {
    /// `baton run` with `baton-torture use` as its command.
    Cli,
    /// `baton-torture lib-client`: the library's `acquire_many`, heartbeat and release.
    Library,
    /// Odd clients the library; even clients the CLI, every other one as `Kept` does (so every
    /// store's faults reach keepers too).
    Mixed,
    /// `baton-torture kept-client`: `baton acquire --keep-alive`, the work, `baton release`, as
    /// a CI job's steps take a turn; a kill or a pause of the client reaches its keeper too, as
    /// a runner that dies takes the job's leftover processes with it.
    Kept,
    /// `baton-torture turns-client`: a turn through `baton serve`'s turns API, the server
    /// waiting, the client keeping only the one rule (as the Python, TypeScript and Go clients).
    Turns,
}

/// The environment variable every client process carries (`RUN WHO`), and so the keepers that
/// `baton acquire --keep-alive` leaves, which are in no process group of the client's: how a
/// fault finds them.
pub const CLIENT_MARK: &str = "BATON_TORTURE_CLIENT";

/// The processes that carry `CLIENT_MARK` for client `who` of run `run` (`who` empty: for
/// any client of the run).
pub(crate) fn marked(run: &str, who: &str) -> Vec<i32> {
    let whole = format!("{run} {who}");
    baton_torture::procfs::with_env(CLIENT_MARK, |value| {
        if who.is_empty() {
            value.starts_with(&whole)
        } else {
            value == whole
        }
    })
}

/// Everything a run needs (see `baton-torture run --help`).
pub struct Config {
    pub store: String,
    pub baton: PathBuf,
    pub own: PathBuf,
    pub clients: usize,
    pub rounds: usize,
    pub duration: Option<Duration>,
    pub kind: Kind,
    /// How many keys the clients share (each turn takes one, in turn).
    pub keys: usize,
    pub limit: u32,
    pub hold: Duration,
    pub client: ClientKind,
    pub ttl: Duration,
    pub waiter_ttl: Duration,
    pub poll_min: Duration,
    pub poll_max: Duration,
    pub seed: u64,
    pub faults: Vec<Fault>,
    pub every: Duration,
    pub hole: Duration,
    pub restart_cmd: Option<String>,
    pub skew: Option<Duration>,
    pub takeover_slack: Duration,
    pub key: String,
    pub unprotected: bool,
    pub work: Work,
    /// Library clients read the key first and enqueue by arrival when they saw it held
    /// (`AcquireOptions::by_arrival`).
    pub by_arrival: bool,
}

impl Config {
    fn poll(&self) -> String {
        format!(
            "{}ms..{}ms",
            self.poll_min.as_millis(),
            self.poll_max.as_millis()
        )
    }

    /// The claim window the clients use (as `AcquireOptions::claim` computes it).
    fn claim(&self) -> Duration {
        let poll_max_ms = u64::try_from(self.poll_max.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(baton_core::lease::claim_window_ms(poll_max_ms))
    }

    /// How long `stop-before-reply` keeps a client stopped: a second past the longest of its
    /// lease, its waiter lease and its claim window, so that whatever its write set up has
    /// ended in the store by the time it reads the answer.
    fn stop_pause(&self) -> Duration {
        self.ttl.max(self.waiter_ttl).max(self.claim()) + Duration::from_secs(1)
    }

    /// The run's keys: `KEY` alone, or `KEY/k0`, `KEY/k1`, … (kinds in turn with `mixed`).
    pub fn key_plans(&self) -> Vec<KeyPlan> {
        let n = self.keys.max(1);
        (0..n)
            .map(|i| {
                let kind = match self.kind {
                    Kind::Mixed => [Kind::Mutex, Kind::Semaphore, Kind::Shared, Kind::Pool][i % 4],
                    kind => kind,
                };
                let limit = match kind {
                    Kind::Semaphore | Kind::Pool => self.limit,
                    _ => 1,
                };
                KeyPlan {
                    name: if n == 1 {
                        self.key.clone()
                    } else {
                        format!("{}/k{i}", self.key)
                    },
                    kind,
                    limit,
                    slots: match kind {
                        Kind::Pool => (0..limit).map(|s| format!("s{s}")).collect(),
                        _ => Vec::new(),
                    },
                }
            })
            .collect()
    }

    /// Refuses combinations that cannot mean anything, saying what to do instead.
    pub fn check(&self) -> Result<(), String> {
        // The work half's resource keys (job keys, run-once keys) are all fenced.
        let mutexes = self.work != Work::Locks || self.key_plans().iter().any(KeyPlan::fenced);
        for stopping in [Fault::PauseHolder, Fault::StopBeforeReply] {
            if self.faults.contains(&stopping) && !mutexes {
                return Err(format!(
                    "{} needs a mutex or a pool key (--kind mutex, pool or mixed): only a \
                     fence protects a resource from a holder paused past its lease, and only \
                     a mutex's resource and a pool's slots check fences",
                    stopping.name()
                ));
            }
        }
        if self.faults.contains(&Fault::Restart) && self.restart_cmd.is_none() {
            return Err("the restart fault needs --restart-cmd (e.g. \
                        'scripts/restart-server.sh redis --kill')"
                .into());
        }
        if self.faults.contains(&Fault::PauseInTransaction) && !self.store.starts_with("sqlite:") {
            return Err("pause-in-transaction is for sqlite: stores".into());
        }
        if self.work != Work::Locks && self.unprotected {
            return Err("--unprotected is for --work locks".into());
        }
        if self.work == Work::All && self.clients < 3 {
            return Err("--work all needs --clients 3 or more (jobs, once, kv in turn)".into());
        }
        if self.clients == 0 {
            return Err("--clients must be at least 1".into());
        }
        if self.skew.is_some() && clients::libfaketime().is_none() {
            return Err("--skew needs libfaketime (Debian: apt-get install faketime)".into());
        }
        if self.kind == Kind::Mixed && self.keys < 3 {
            return Err(
                "--kind mixed needs --keys 3 or more (a mutex, a semaphore, a shared \
                        key, then a pool)"
                    .into(),
            );
        }
        if self.kind == Kind::Pool && self.limit < 2 {
            return Err("--kind pool needs --limit 2 or more (the pool's slots)".into());
        }
        Ok(())
    }
}

/// One fault injected: what, when (ns on the run's clock), to whom, for how long.
#[derive(Clone, Debug)]
struct Event {
    fault: Fault,
    at_ns: u64,
    who: Option<String>,
    lasted: Duration,
}

/// A client process while it runs.
#[derive(Clone, Copy, Debug)]
struct Running {
    /// The process the harness started (`baton run`, or the library client).
    pid: i32,
    started: Instant,
    /// Whether its key is a mutex (only those clients may be stopped past their lease).
    fenced: bool,
}

/// What the resource's server, the client threads and the fault thread share.
struct Shared {
    resource: Mutex<Resource>,
    /// The mutex keys (a paused holder is picked only on one).
    fenced: HashSet<String>,
    /// Every key is fenced (the work half: job keys, run-once keys).
    all_fenced: bool,
    started: Instant,
    last_ns: Mutex<u64>,
    running: Mutex<HashMap<String, Running>>,
    /// Worker pids by client name, from HELLO.
    workers: Mutex<HashMap<String, i32>>,
    killed: Mutex<HashSet<String>>,
    paused: Mutex<Vec<(String, Vec<i32>)>>,
    events: Mutex<Vec<Event>>,
    /// Faults on a holder or a waiter that found no one to hit for as long as they were tried:
    /// when (ns on the run's clock), and what they saw.
    missed: Mutex<Vec<(Fault, u64, String)>>,
    done: AtomicBool,
    /// The run's key, which every client's [`CLIENT_MARK`] starts with.
    run: String,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// The run's clock: nanoseconds since it started, strictly increasing, so no two records
    /// share an instant.
    fn now_ns(&self) -> u64 {
        let now = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut last = lock(&self.last_ns);
        *last = now.max(*last + 1);
        *last
    }

    /// Whether the resource checks fences on `key`.
    fn is_fenced(&self, key: &str) -> bool {
        self.all_fenced || self.fenced.contains(key)
    }

    fn record(&self, fault: Fault, who: Option<String>, lasted: Duration) {
        let at_ns = self.now_ns();
        lock(&self.events).push(Event {
            fault,
            at_ns,
            who,
            lasted,
        });
    }

    fn miss(&self, fault: Fault, seen: String) {
        let at_ns = self.now_ns();
        lock(&self.missed).push((fault, at_ns, seen));
    }
}

/// Writes the holds, then the faults, to the run's log: its last lines, which a failed test
/// prints, are then the faults and the ones that found no one to hit (but for what the
/// verdict's own commands may write after them).
fn log_timeline(
    log: &File,
    intervals: &[Interval],
    events: &[Event],
    missed: &[(Fault, u64, String)],
) {
    let mut log = log;
    for interval in intervals {
        let _ = writeln!(
            log,
            "hold {:.3}s..{:.3}s: {} fence {}",
            interval.start_ns as f64 / 1e9,
            interval.end_ns as f64 / 1e9,
            interval.who,
            interval.fence
        );
    }
    for event in events {
        let _ = writeln!(
            log,
            "fault at {:.3}s: {} {} for {:?}",
            event.at_ns as f64 / 1e9,
            event.fault.name(),
            event.who.as_deref().unwrap_or("-"),
            event.lasted
        );
    }
    for (fault, at_ns, seen) in missed {
        let _ = writeln!(
            log,
            "fault missed at {:.3}s: {} found no one to hit: {seen}",
            *at_ns as f64 / 1e9,
            fault.name()
        );
    }
}

/// Sends `signal` to `pid` (negative: a process group). False if there was no such process.
fn signal(pid: i32, signal: i32) -> bool {
    // SAFETY: kill(2) has no memory effects; a stale pid at worst signals nothing.
    unsafe { libc::kill(pid, signal) == 0 }
}

/// The verdict of a run.
pub struct Verdict {
    /// The summary (printed, and with `--json` printed as JSON).
    pub summary: Value,
    /// Every violation.
    pub violations: Vec<Violation>,
}

/// Runs the clients under the faults and checks the records.
pub fn run(config: &Config) -> Result<Verdict, String> {
    config.check()?;
    durable::check_restarted_store(config)?;
    let began = Instant::now();
    let log_path = std::env::temp_dir().join(format!(
        "baton-torture-{}.log",
        config.key.replace('/', "-")
    ));
    let log = File::create(&log_path)
        .map_err(|e| format!("cannot create the log {}: {e}", log_path.display()))?;
    if !config.unprotected {
        baton_ok(config, &config.store, &["init"], &log)?;
    }

    // The proxy sits between every client and the store; the harness's own reads go direct.
    let proxy = if config.faults.iter().any(|f| f.needs_proxy()) {
        Some(ProxiedStore::start(&config.store)?)
    } else {
        None
    };

    let keys = config.key_plans();
    let shared = Arc::new(Shared {
        resource: Mutex::new(Resource::new(
            keys.iter()
                .flat_map(KeyPlan::resources)
                .map(|(name, spec)| (name, spec.fenced)),
        )),
        fenced: keys
            .iter()
            .flat_map(KeyPlan::resources)
            .filter(|(_, spec)| spec.fenced)
            .map(|(name, _)| name)
            .collect(),
        all_fenced: config.work != Work::Locks,
        started: Instant::now(),
        last_ns: Mutex::new(0),
        running: Mutex::new(HashMap::new()),
        workers: Mutex::new(HashMap::new()),
        killed: Mutex::new(HashSet::new()),
        paused: Mutex::new(Vec::new()),
        events: Mutex::new(Vec::new()),
        missed: Mutex::new(Vec::new()),
        run: config.key.clone(),
        done: AtomicBool::new(false),
    });
    let address = serve(shared.clone())?;

    let deadline = config.duration.map(|d| Instant::now() + d);
    // (key index, process, what it worked on)
    let processes = Arc::new(Mutex::new(Vec::<(usize, Process, String)>::new()));
    let exits = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let clients: Vec<_> = (0..config.clients)
        .map(|c| {
            let plan = ClientPlan::new(config, &keys, c, &address, proxy.as_ref(), &log)?;
            let (shared, processes, exits) = (shared.clone(), processes.clone(), exits.clone());
            let rounds = config.rounds;
            Ok(std::thread::spawn(move || {
                let mut r = 0;
                while deadline.map_or(r < rounds, |d| Instant::now() < d) {
                    let (k, who, subject, ending) = plan.turn(&shared, r, deadline);
                    if !matches!(ending, Ending::Exited(Some(0))) {
                        // A store that is down fails a turn at once: do not spin through
                        // rounds while it restarts.
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    let name = match &ending {
                        Ending::Killed => "killed".to_owned(),
                        Ending::Exited(Some(code)) => format!("exit {code}"),
                        Ending::Exited(None) => "killed by another signal".to_owned(),
                    };
                    *lock(&exits).entry(name).or_default() += 1;
                    lock(&processes).push((k, Process { who, ending }, subject));
                    r += 1;
                }
            }))
        })
        .collect::<Result<_, String>>()?;
    let sampler = (!config.unprotected).then(|| {
        let (baton, store) = (config.baton.clone(), config.store.clone());
        sampler::start(baton, store, config.key.clone(), shared.clone())
    });
    let submitter = config
        .work
        .has_jobs()
        .then(|| jobs::Submitter::start(config, shared.clone(), proxy.as_ref(), deadline, &log));

    let faults = {
        let shared = shared.clone();
        let injector = Injector {
            schedule: Schedule::new(config.seed, &config.faults, config.every),
            shared,
            ttl: config.ttl,
            stop_pause: config.stop_pause(),
            hole: config.hole,
            restart_cmd: config.restart_cmd.clone(),
            proxy: proxy.as_ref().map(|p| p.proxy.clone()),
            store: config.store.clone(),
        };
        std::thread::spawn(move || injector.run())
    };
    for client in clients {
        let _ = client.join();
    }
    let submitted = match submitter {
        Some(submitter) => Some(submitter?.join().map_err(|_| "the submitter panicked")?),
        None => None,
    };
    shared.done.store(true, Ordering::SeqCst);
    let _ = faults.join();
    let queues = sampler.and_then(|s| s.join().ok()).unwrap_or_default();
    // Keepers left by kept-alive clients that were killed while their acquire ran: the run is
    // over, as a CI job whose runner kills what it left.
    for pid in marked(&config.key, "") {
        signal(pid, libc::SIGKILL);
    }
    for (_, pids) in lock(&shared.paused).drain(..) {
        for pid in pids {
            signal(pid, libc::SIGCONT);
        }
    }
    let proxy_stats = proxy.as_ref().map(|p| p.proxy.stats());
    drop(proxy);
    // The jobs still queued run now, with the faults over, so that each one ends.
    let jobs = match submitted {
        Some(submitted) => Some(jobs::drain(config, &address, submitted, &log)?),
        None => None,
    };

    let mut resource = lock(&shared.resource);
    resource.close_all();
    let intervals = resource.accepted().to_vec();
    let fenced_off = resource.rejected().to_vec();
    let writes = resource.writes();
    drop(resource);
    let processes = lock(&processes).clone();
    let exits = lock(&exits).clone();
    let events = lock(&shared.events).clone();
    let missed = lock(&shared.missed).clone();
    log_timeline(&log, &intervals, &events, &missed);

    let (mut violations, details) = match config.work {
        Work::Locks => lock_verdict(config, &keys, &intervals, &processes, &events, &log)?,
        _ => work_verdict::verdict(config, &intervals, &processes, jobs, &log)?,
    };
    // A holder that was not paused stops before its lease can end (`baton run` kills its
    // command, the library client stops at the heartbeat's word): a fence refusing it means a
    // lease ended under a holder that was still running. A lost reply stops nobody: a client
    // whose write went unanswered and then was fenced off believed it held what the store had
    // given away.
    let paused: HashSet<&str> = events
        .iter()
        .filter(|e| e.fault.stops_process())
        .filter_map(|e| e.who.as_deref())
        .collect();
    for rejection in fenced_off
        .iter()
        .filter(|r| !paused.contains(r.who.as_str()))
    {
        violations.push(Violation::FencedOffUnpaused {
            who: rejection.who.clone(),
            why: format!("{:?}", rejection.why),
        });
    }
    // While a process is stopped inside SQLite's write transaction nobody can write: no grant,
    // so no hold may begin (but one granted just before the stop: a second's grace).
    for stop in events
        .iter()
        .filter(|e| e.fault == Fault::PauseInTransaction)
    {
        let from = stop.at_ns + 1_000_000_000;
        let until = stop.at_ns + u64::try_from(stop.lasted.as_nanos()).unwrap_or(0);
        for hold in intervals
            .iter()
            .filter(|i| i.start_ns > from && i.start_ns < until)
        {
            violations.push(Violation::HeldWhileStopped {
                who: hold.who.clone(),
                stopped: stop.who.clone().unwrap_or_default(),
            });
        }
    }
    // The work half's clients exit otherwise on purpose (a flaky command, a worker told to
    // stop); their checkers read what landed instead.
    let quiet = config.faults.is_empty() && config.skew.is_none() && config.work == Work::Locks;
    let quiet_failures: u64 = if quiet {
        exits
            .iter()
            .filter(|(name, _)| name.as_str() != "exit 0")
            .map(|(_, n)| n)
            .sum()
    } else {
        0
    };

    let mut injected = BTreeMap::<&str, u64>::new();
    for event in &events {
        *injected.entry(event.fault.name()).or_default() += 1;
    }
    let mut missed_counts = BTreeMap::<&str, u64>::new();
    for (fault, _, _) in &missed {
        *missed_counts.entry(fault.name()).or_default() += 1;
    }
    let lost = violations
        .iter()
        .filter(|v| matches!(v, Violation::Lost { .. }))
        .count();
    let summary = json!({
        "store": config.store,
        "key": config.key,
        "keys": keys.len(),
        "kind": config.kind.name(),
        "clients": config.clients,
        "work": config.work.name(),
        "client": format!("{:?}", config.client).to_lowercase(),
        "by_arrival": config.by_arrival,
        "arrivals": if config.by_arrival { arrivals_in(&log_path) } else { 0 },
        "seed": config.seed,
        "faults": config.faults.iter().map(|f| f.name()).collect::<Vec<_>>(),
        "skew_s": config.skew.map(|s| s.as_secs()),
        "turns": processes.len(),
        "exits": exits,
        "failed_in_quiet_run": quiet_failures,
        "holds": intervals.len(),
        // Holds of a pool's slots (the key's own resource is each slot).
        "pool_holds": intervals
            .iter()
            .filter(|i| baton_torture::pool_of(&i.key) != i.key)
            .count(),
        "writes": writes,
        "fenced_off": fenced_off.len(),
        "injected": injected,
        // Faults on a holder or a waiter that found no one to hit (the log says what they saw).
        "missed": missed_counts,
        // What the fault proxy saw: whether the reply faults had writes to work with.
        "proxy": proxy_stats.map(|p| json!({
            "connections": p.connections_accepted,
            "writes": p.writes_forwarded,
            "replies_lost": p.replies_lost,
            "replies_hooked": p.replies_hooked,
        })),
        "violations": violations.len(),
        "lost": lost,
        "takeover_ms": details["takeover_ms"],
        // The most turns seen waiting on one key: in its window, in its backlog.
        "queues": queues.json(),
        "work_half": details["work_half"],
        "elapsed_s": began.elapsed().as_secs_f64(),
        "log": log_path.display().to_string(),
    });
    if quiet_failures > 0 {
        violations.push(Violation::Lost {
            ticket: "(quiet run)".into(),
            why: format!("{quiet_failures} turns failed in a run without faults: see the log"),
        });
    }
    Ok(Verdict {
        summary,
        violations,
    })
}

/// The checks of a lock run: the holds against each key's promise, each key's history swept
/// and read back, and the takeover times; details: `{"takeover_ms": …}`.
fn lock_verdict(
    config: &Config,
    keys: &[KeyPlan],
    intervals: &[Interval],
    processes: &[(usize, Process, String)],
    events: &[Event],
    log: &File,
) -> Result<(Vec<Violation>, Value), String> {
    let mut specs: HashMap<String, KeySpec> = keys.iter().flat_map(KeyPlan::resources).collect();
    // A pool's holds count against the pool too: never more than its slots at once.
    let mut counted = intervals.to_vec();
    for key in keys.iter().filter(|k| !k.slots.is_empty()) {
        specs.insert(key.name.clone(), key.spec());
        counted.extend(
            intervals
                .iter()
                .filter(|i| i.key != key.name && baton_torture::pool_of(&i.key) == key.name)
                .map(|i| Interval {
                    key: key.name.clone(),
                    ..i.clone()
                }),
        );
    }
    let mut violations = check_intervals(&specs, &counted);
    // Each key's history, checked on its own: arrival numbers are per key.
    let mut history = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        if config.unprotected {
            break;
        }
        let (entries, still_live) = sweep(config, key, log)?;
        let turns: Vec<Process> = processes
            .iter()
            .filter(|(i, _, _)| *i == k)
            .map(|(_, p, _)| p.clone())
            .collect();
        let holds: Vec<Interval> = intervals
            .iter()
            .filter(|i| baton_torture::pool_of(&i.key) == key.name)
            .cloned()
            .collect();
        violations.extend(check_history(&turns, &entries, &holds, &still_live));
        history.extend(entries);
    }
    let key_of: HashMap<&str, &str> = processes
        .iter()
        .map(|(k, p, _)| (p.who.as_str(), keys[*k].name.as_str()))
        .collect();
    let takeovers = takeovers(config, events, intervals, &history, &key_of);
    violations.extend(takeovers.late.iter().cloned());
    Ok((violations, json!({ "takeover_ms": takeovers.json() })))
}

/// Runs `baton SUBCOMMAND… --store URL` to its end; its stderr goes to the log.
fn baton_ok(config: &Config, store: &str, args: &[&str], log: &File) -> Result<String, String> {
    let output = Command::new(&config.baton)
        .args(args)
        .args(["--store", store])
        .stdin(Stdio::null())
        .stderr(log.try_clone().map_or(Stdio::null(), Stdio::from))
        .output()
        .map_err(|e| format!("cannot run {}: {e}", config.baton.display()))?;
    if !output.status.success() {
        return Err(format!(
            "`baton {} --store {store}` failed ({}): see the log",
            args.join(" "),
            output.status
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Serves the resource on a loopback port; returns its address.
fn serve(shared: Arc<Shared>) -> Result<String, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot listen: {e}"))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("no local address: {e}"))?
        .to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let shared = shared.clone();
            std::thread::spawn(move || connection(stream, &shared));
        }
    });
    Ok(address)
}

/// One client connection (see [`baton_torture::work`] for the protocol). When it closes, every
/// hold it made ends at its last accepted write.
fn connection(stream: TcpStream, shared: &Shared) {
    baton_torture::work::serve_connection(
        stream,
        |who, pid| {
            if let Ok(pid) = pid.parse() {
                lock(&shared.workers).insert(who.to_owned(), pid);
            }
        },
        |who, words, made| {
            // The instant is taken under the lock: records in the order writes were judged.
            let mut resource = lock(&shared.resource);
            let now = shared.now_ns();
            resource.answer(who, words, now, made)
        },
        |made| {
            let mut resource = lock(&shared.resource);
            for (key, ticket) in made {
                resource.end(&key, &ticket);
            }
        },
    );
}

/// How many turns arrived beside a document, as the library clients of a run by arrival say in
/// its log (`baton_client::waiter::arrive`'s line): a run by arrival where none did tortured
/// nothing of it.
fn arrivals_in(log_path: &std::path::Path) -> usize {
    std::fs::read_to_string(log_path).map_or(0, |log| {
        log.lines()
            .filter(|line| line.contains("arrived beside the document"))
            .count()
    })
}
