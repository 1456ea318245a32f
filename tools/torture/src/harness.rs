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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use baton_torture::checker::Violation;
use baton_torture::checker::{check_history, check_intervals, Ending, Entry, KeySpec, Process};
use baton_torture::faults::{Fault, Schedule};
use baton_torture::proxy::Proxy;
use baton_torture::resource::{Holder, Resource};
use baton_torture::{Interval, Mode};
use serde_json::{json, Value};

/// What a key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// One holder at a time; fences must rise.
    Mutex,
    /// Up to --limit holders at once.
    Semaphore,
    /// Every client shared except one in three, which is normal: shared never beside normal.
    Shared,
    /// With --keys 3 or more: a mutex, a semaphore and a shared key, and so on in turn.
    Mixed,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Semaphore => "semaphore",
            Kind::Shared => "shared",
            Kind::Mixed => "mixed",
        }
    }
}

/// One key of a run: its name and what it is (never `Mixed`).
#[derive(Clone, Debug)]
pub struct KeyPlan {
    pub name: String,
    pub kind: Kind,
    /// The key's limit (1 but for a semaphore).
    pub limit: u32,
}

impl KeyPlan {
    fn spec(&self) -> KeySpec {
        KeySpec {
            limit: self.limit,
            fenced: self.kind == Kind::Mutex,
        }
    }
}

/// Which client the processes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientKind {
    /// `baton run` with `baton-torture use` as its command.
    Cli,
    /// `baton-torture lib-client`: the library's `acquire_many`, heartbeat and release.
    Library,
    /// Even clients the CLI, odd clients the library.
    Mixed,
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
        self.poll_max * 2 + Duration::from_secs(2)
    }

    /// The run's keys: `KEY` alone, or `KEY/k0`, `KEY/k1`, … (kinds in turn with `mixed`).
    pub fn key_plans(&self) -> Vec<KeyPlan> {
        let n = self.keys.max(1);
        (0..n)
            .map(|i| {
                let kind = match self.kind {
                    Kind::Mixed => [Kind::Mutex, Kind::Semaphore, Kind::Shared][i % 3],
                    kind => kind,
                };
                KeyPlan {
                    name: if n == 1 {
                        self.key.clone()
                    } else {
                        format!("{}/k{i}", self.key)
                    },
                    kind,
                    limit: if kind == Kind::Semaphore {
                        self.limit
                    } else {
                        1
                    },
                }
            })
            .collect()
    }

    /// Refuses combinations that cannot mean anything, saying what to do instead.
    pub fn check(&self) -> Result<(), String> {
        let mutexes = self.key_plans().iter().any(|k| k.kind == Kind::Mutex);
        if self.faults.contains(&Fault::PauseHolder) && !mutexes {
            return Err(
                "pause-holder needs a mutex key (--kind mutex, or mixed): only a fence protects \
                 a resource from a holder paused past its lease, and only a mutex's resource \
                 checks fences"
                    .into(),
            );
        }
        if self.faults.contains(&Fault::Restart) && self.restart_cmd.is_none() {
            return Err("the restart fault needs --restart-cmd (e.g. \
                        'scripts/restart-server.sh redis --kill')"
                .into());
        }
        if self.faults.contains(&Fault::PauseInTransaction) && !self.store.starts_with("sqlite:") {
            return Err("pause-in-transaction is for sqlite: stores".into());
        }
        if self.clients == 0 {
            return Err("--clients must be at least 1".into());
        }
        if self.kind == Kind::Mixed && self.keys < 3 {
            return Err(
                "--kind mixed needs --keys 3 or more (a mutex, a semaphore, a shared key)".into(),
            );
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

/// A client process while it runs: its own pid, and the pid of the process that does the
/// work (the command of `baton run`, which is in a process group of its own), once known.
#[derive(Clone, Copy, Debug)]
struct Running {
    pid: i32,
    started: Instant,
}

/// What the resource's server, the client threads and the fault thread share.
struct Shared {
    resource: Mutex<Resource>,
    /// The mutex keys (a paused holder is picked only on one).
    fenced: HashSet<String>,
    started: Instant,
    last_ns: Mutex<u64>,
    running: Mutex<HashMap<String, Running>>,
    /// Worker pids by client name, from HELLO.
    workers: Mutex<HashMap<String, i32>>,
    killed: Mutex<HashSet<String>>,
    paused: Mutex<Vec<(String, Vec<i32>)>>,
    events: Mutex<Vec<Event>>,
    done: AtomicBool,
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

    fn record(&self, fault: Fault, who: Option<String>, lasted: Duration) {
        let at_ns = self.now_ns();
        lock(&self.events).push(Event {
            fault,
            at_ns,
            who,
            lasted,
        });
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
            keys.iter().map(|k| (k.name.clone(), k.spec().fenced)),
        )),
        fenced: keys
            .iter()
            .filter(|k| k.spec().fenced)
            .map(|k| k.name.clone())
            .collect(),
        started: Instant::now(),
        last_ns: Mutex::new(0),
        running: Mutex::new(HashMap::new()),
        workers: Mutex::new(HashMap::new()),
        killed: Mutex::new(HashSet::new()),
        paused: Mutex::new(Vec::new()),
        events: Mutex::new(Vec::new()),
        done: AtomicBool::new(false),
    });
    let address = serve(shared.clone())?;

    let deadline = config.duration.map(|d| Instant::now() + d);
    // (key index, process)
    let processes = Arc::new(Mutex::new(Vec::<(usize, Process)>::new()));
    let exits = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let clients: Vec<_> = (0..config.clients)
        .map(|c| {
            let plan = ClientPlan::new(config, &keys, c, &address, proxy.as_ref(), &log)?;
            let (shared, processes, exits) = (shared.clone(), processes.clone(), exits.clone());
            let rounds = config.rounds;
            Ok(std::thread::spawn(move || {
                let mut r = 0;
                while deadline.map_or(r < rounds, |d| Instant::now() < d) {
                    let (k, who, ending) = plan.turn(&shared, r);
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
                    lock(&processes).push((k, Process { who, ending }));
                    r += 1;
                }
            }))
        })
        .collect::<Result<_, String>>()?;

    let faults = {
        let shared = shared.clone();
        let injector = Injector {
            schedule: Schedule::new(config.seed, &config.faults, config.every),
            shared,
            ttl: config.ttl,
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
    shared.done.store(true, Ordering::SeqCst);
    let _ = faults.join();
    for (_, pids) in lock(&shared.paused).drain(..) {
        for pid in pids {
            signal(pid, libc::SIGCONT);
        }
    }
    drop(proxy);

    let mut resource = lock(&shared.resource);
    resource.close_all();
    let intervals = resource.accepted().to_vec();
    let fenced_off = resource.rejected().to_vec();
    let writes = resource.writes();
    drop(resource);
    let processes = lock(&processes).clone();
    let exits = lock(&exits).clone();
    let events = lock(&shared.events).clone();
    for event in &events {
        let _ = writeln!(
            &log,
            "fault at {:.3}s: {} {} for {:?}",
            event.at_ns as f64 / 1e9,
            event.fault.name(),
            event.who.as_deref().unwrap_or("-"),
            event.lasted
        );
    }
    for interval in &intervals {
        let _ = writeln!(
            &log,
            "hold {:.3}s..{:.3}s: {} fence {}",
            interval.start_ns as f64 / 1e9,
            interval.end_ns as f64 / 1e9,
            interval.who,
            interval.fence
        );
    }

    let specs: HashMap<String, KeySpec> = keys.iter().map(|k| (k.name.clone(), k.spec())).collect();
    let mut violations = check_intervals(&specs, &intervals);
    // Each key's history, checked on its own: arrival numbers are per key.
    let mut history = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        if config.unprotected {
            break;
        }
        let (entries, still_live) = sweep(config, key, &log)?;
        let turns: Vec<Process> = processes
            .iter()
            .filter(|(i, _)| *i == k)
            .map(|(_, p)| p.clone())
            .collect();
        let holds: Vec<Interval> = intervals
            .iter()
            .filter(|i| i.key == key.name)
            .cloned()
            .collect();
        violations.extend(check_history(&turns, &entries, &holds, &still_live));
        history.extend(entries);
    }
    // A holder that was not paused stops before its lease can end (`baton run` kills its
    // command, the library client stops at the heartbeat's word): a fence refusing it means a
    // lease ended under a holder that was still running.
    let paused: HashSet<&str> = events
        .iter()
        .filter(|e| matches!(e.fault, Fault::PauseHolder | Fault::PauseInTransaction))
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
    let key_of: HashMap<&str, &str> = processes
        .iter()
        .map(|(k, p)| (p.who.as_str(), keys[*k].name.as_str()))
        .collect();
    let takeovers = takeovers(config, &events, &intervals, &history, &key_of);
    violations.extend(takeovers.late.iter().cloned());
    let quiet_failures: u64 = if config.faults.is_empty() && config.skew.is_none() {
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
    let lost = violations
        .iter()
        .filter(|v| matches!(v, Violation::Lost { .. }))
        .count();
    let summary = json!({
        "store": config.store,
        "key": config.key,
        "keys": keys.len(),
        "kind": config.kind.name(),
        "client": format!("{:?}", config.client).to_lowercase(),
        "seed": config.seed,
        "faults": config.faults.iter().map(|f| f.name()).collect::<Vec<_>>(),
        "skew_s": config.skew.map(|s| s.as_secs()),
        "turns": processes.len(),
        "exits": exits,
        "failed_in_quiet_run": quiet_failures,
        "holds": intervals.len(),
        "writes": writes,
        "fenced_off": fenced_off.len(),
        "injected": injected,
        "violations": violations.len(),
        "lost": lost,
        "takeover_ms": takeovers.json(),
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
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut who = String::from("?");
    let mut made: HashSet<(String, String)> = HashSet::new();
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["HELLO", name, pid] => {
                who = (*name).to_owned();
                if let Ok(pid) = pid.parse() {
                    lock(&shared.workers).insert(who.clone(), pid);
                }
                "OK".to_owned()
            }
            ["WRITE", key, ticket, fence, mode] => match fence.parse::<u64>() {
                Ok(fence) => {
                    let mode = if *mode == "shared" {
                        Mode::Shared
                    } else {
                        Mode::Normal
                    };
                    made.insert(((*key).to_owned(), (*ticket).to_owned()));
                    let mut resource = lock(&shared.resource);
                    let now = shared.now_ns();
                    match resource.write(key, ticket, &who, fence, mode, now) {
                        Ok(()) => "OK".to_owned(),
                        Err(why) => format!("REJECTED {why:?}"),
                    }
                }
                Err(_) => format!("ERROR bad fence {fence}"),
            },
            ["END", key, ticket] => {
                lock(&shared.resource).end(key, ticket);
                "OK".to_owned()
            }
            _ => format!("ERROR cannot read {line:?}"),
        };
        if writeln!(writer, "{reply}").is_err() {
            break;
        }
    }
    let mut resource = lock(&shared.resource);
    for (key, ticket) in made {
        resource.end(&key, &ticket);
    }
}

/// A store reached through the fault proxy: the proxy, and how clients are pointed at it.
struct ProxiedStore {
    proxy: Arc<Proxy>,
    /// The store URL clients use.
    url: String,
    /// For S3 and DynamoDB, whose endpoint is in the environment: `AWS_ENDPOINT_URL`.
    endpoint: Option<String>,
}

impl ProxiedStore {
    /// Starts a proxy in front of the loopback address in `store` (or in `AWS_ENDPOINT_URL`).
    fn start(store: &str) -> Result<ProxiedStore, String> {
        let in_env = store.starts_with("s3://") || store.starts_with("dynamodb://");
        let text = if in_env {
            std::env::var("AWS_ENDPOINT_URL").map_err(|_| {
                "proxy faults on s3:// and dynamodb:// need AWS_ENDPOINT_URL (a loopback server)"
                    .to_owned()
            })?
        } else {
            store.to_owned()
        };
        let (address, at) = loopback_address(&text).ok_or_else(|| {
            format!("proxy faults need a store at 127.0.0.1:PORT; {text} has none")
        })?;
        let proxy = Proxy::start(address)
            .map_err(|e| format!("cannot start the fault proxy to {address}: {e}"))?;
        let rewritten = format!("{}{}{}", &text[..at.0], proxy.address(), &text[at.1..]);
        Ok(if in_env {
            ProxiedStore {
                proxy: Arc::new(proxy),
                url: store.to_owned(),
                endpoint: Some(rewritten),
            }
        } else {
            ProxiedStore {
                proxy: Arc::new(proxy),
                url: rewritten,
                endpoint: None,
            }
        })
    }
}

/// The first `127.0.0.1:PORT` in `text`, and where it is.
fn loopback_address(text: &str) -> Option<(SocketAddr, (usize, usize))> {
    let start = text.find("127.0.0.1:")?;
    let digits = &text[start + "127.0.0.1:".len()..];
    let len = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let end = start + "127.0.0.1:".len() + len;
    let address = text[start..end].parse().ok()?;
    Some((address, (start, end)))
}

/// Stands for the client process's name (`cC-rR`) in a [`ClientPlan`]'s command.
const WHO: &str = "{who}";

/// How one client thread starts its processes.
struct ClientPlan {
    c: usize,
    /// The command for each key, in key order.
    commands: Vec<Vec<String>>,
    env: Vec<(String, String)>,
    log: File,
}

impl ClientPlan {
    fn new(
        config: &Config,
        keys: &[KeyPlan],
        c: usize,
        resource: &str,
        proxy: Option<&ProxiedStore>,
        log: &File,
    ) -> Result<ClientPlan, String> {
        let mut env = Vec::new();
        if let Some(endpoint) = proxy.and_then(|p| p.endpoint.clone()) {
            env.push(("AWS_ENDPOINT_URL".to_owned(), endpoint));
        }
        let mut commands = Vec::new();
        for key in keys {
            commands.push(ClientPlan::command(
                config, key, c, resource, proxy, &mut env,
            ));
        }
        Ok(ClientPlan {
            c,
            commands,
            env,
            log: log
                .try_clone()
                .map_err(|e| format!("cannot share the log: {e}"))?,
        })
    }

    /// Client `c`'s command line for `key`.
    fn command(
        config: &Config,
        key: &KeyPlan,
        c: usize,
        resource: &str,
        proxy: Option<&ProxiedStore>,
        env: &mut Vec<(String, String)>,
    ) -> Vec<String> {
        let store = proxy.map_or(config.store.clone(), |p| p.url.clone());
        let shared = key.kind == Kind::Shared && !c.is_multiple_of(3);
        let library = match config.client {
            ClientKind::Cli => false,
            ClientKind::Library => true,
            ClientKind::Mixed => c % 2 == 1,
        };
        let mut command: Vec<String> = Vec::new();
        // One client in three runs with its clock ahead, one behind (real skew leaves the
        // monotonic clock alone, so faketime must too).
        if let Some(skew) = config.skew {
            let sign = match c % 3 {
                1 => Some('+'),
                2 => Some('-'),
                _ => None,
            };
            if let Some(sign) = sign {
                command.extend(["faketime".into(), "-f".into()]);
                command.push(format!("{sign}{}s", skew.as_secs()));
                if !env.iter().any(|(k, _)| k == "FAKETIME_DONT_FAKE_MONOTONIC") {
                    env.push(("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()));
                }
            }
        }
        let own = config.own.display().to_string();
        let hold = format!("{}ms", config.hold.as_millis());
        let mut timing = vec![
            "--ttl".to_owned(),
            format!("{}ms", config.ttl.as_millis()),
            "--waiter-ttl".to_owned(),
            format!("{}ms", config.waiter_ttl.as_millis()),
            "--limit".to_owned(),
            key.limit.to_string(),
        ];
        if library {
            timing.extend([
                "--poll-min".to_owned(),
                format!("{}ms", config.poll_min.as_millis()),
                "--poll-max".to_owned(),
                format!("{}ms", config.poll_max.as_millis()),
            ]);
        } else {
            timing.extend(["--poll".to_owned(), config.poll()]);
        }
        if config.unprotected {
            command.extend([own, "use".into()]);
            if !env.iter().any(|(k, _)| k == "BATON_FENCE") {
                env.push(("BATON_FENCE".into(), "1".into()));
            }
        } else if library {
            command.extend([own, "lib-client".into(), "--store".into(), store]);
            command.extend(timing);
            if shared {
                command.push("--shared".into());
            }
        } else {
            command.push(config.baton.display().to_string());
            command.extend(["run".into(), key.name.clone(), "--quiet".into()]);
            command.extend(["--store".into(), store, "--context".into(), WHO.into()]);
            command.extend(timing);
            if shared {
                command.push("--shared".into());
            }
            command.extend(["--".into(), own, "use".into()]);
        }
        command.extend(["--resource".into(), resource.to_owned()]);
        command.extend(["--key".into(), key.name.clone(), "--hold".into(), hold]);
        command.extend(["--who".into(), WHO.into()]);
        if shared && (config.unprotected || !library) {
            command.push("--shared".into());
        }
        command
    }

    /// Runs round `r` of this client to its end, on key `(c + r) mod keys`: (the key's
    /// index, the process's name, how it ended).
    fn turn(&self, shared: &Shared, r: usize) -> (usize, String, Ending) {
        let who = format!("c{}-r{r}", self.c);
        let k = (self.c + r) % self.commands.len();
        let line = &self.commands[k];
        let mut command = Command::new(&line[0]);
        command.args(
            line[1..]
                .iter()
                .map(|a| if a == WHO { who.as_str() } else { a.as_str() }),
        );
        command
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // Read by `use` only when it runs without baton (`--unprotected`).
            .env("BATON_TICKET", &who)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.log.try_clone().map_or(Stdio::null(), Stdio::from));
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                let _ = writeln!(&self.log, "{who}: cannot start: {e}");
                return (k, who, Ending::Exited(Some(-1)));
            }
        };
        let pid = i32::try_from(child.id()).unwrap_or(0);
        lock(&shared.running).insert(
            who.clone(),
            Running {
                pid,
                started: Instant::now(),
            },
        );
        let status = child.wait();
        lock(&shared.running).remove(&who);
        lock(&shared.workers).remove(&who);
        let ending = if lock(&shared.killed).contains(&who) {
            Ending::Killed
        } else {
            Ending::Exited(status.ok().and_then(|s| s.code()))
        };
        if !matches!(ending, Ending::Exited(Some(0)) | Ending::Killed) {
            let _ = writeln!(&self.log, "{who}: {ending:?}");
        }
        (k, who, ending)
    }
}

/// The fault thread.
struct Injector {
    schedule: Schedule,
    shared: Arc<Shared>,
    ttl: Duration,
    hole: Duration,
    restart_cmd: Option<String>,
    proxy: Option<Arc<Proxy>>,
    store: String,
}

impl Injector {
    fn run(mut self) {
        while let Some((wait, fault)) = self.schedule.next_fault() {
            if self.sleep(wait) {
                return;
            }
            self.inject(fault);
        }
    }

    /// Sleeps `wait` unless the run ends first (true then).
    fn sleep(&self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if self.shared.done.load(Ordering::SeqCst) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20).min(until - Instant::now()));
        }
        self.shared.done.load(Ordering::SeqCst)
    }

    fn inject(&mut self, fault: Fault) {
        let shared = &self.shared;
        match fault {
            Fault::KillHolder => {
                let (live, running) = self.live_holders();
                if let Some(i) = self.schedule.pick(live.len()) {
                    let who = live[i].who.clone();
                    self.kill(&who, running[&who].pid);
                    shared.record(fault, Some(who), Duration::ZERO);
                }
            }
            Fault::KillWaiter => {
                let holders: HashSet<String> = lock(&shared.resource)
                    .holders()
                    .into_iter()
                    .map(|h| h.who)
                    .collect();
                let untouchable = self.untouchable();
                let mut waiting: Vec<(String, Running)> = lock(&shared.running)
                    .iter()
                    .filter(|(who, r)| {
                        !holders.contains(*who)
                            && !untouchable.contains(*who)
                            && r.started.elapsed() > Duration::from_millis(30)
                    })
                    .map(|(who, r)| (who.clone(), *r))
                    .collect();
                waiting.sort_by(|a, b| a.0.cmp(&b.0));
                if let Some(i) = self.schedule.pick(waiting.len()) {
                    let (who, running) = waiting.swap_remove(i);
                    self.kill(&who, running.pid);
                    shared.record(fault, Some(who), Duration::ZERO);
                }
            }
            Fault::PauseHolder => {
                let (live, running) = self.live_holders();
                let live: Vec<Holder> = live
                    .into_iter()
                    .filter(|h| shared.fenced.contains(&h.key))
                    .collect();
                if let Some(i) = self.schedule.pick(live.len()) {
                    let who = live[i].who.clone();
                    let top = running[&who].pid;
                    let worker = lock(&shared.workers).get(&who).copied();
                    let pause = self.ttl + Duration::from_secs(1);
                    self.pause(&who, top, worker, pause);
                    shared.record(fault, Some(who), pause);
                }
            }
            Fault::PauseInTransaction => self.pause_in_transaction(),
            Fault::Restart => {
                if let Some(cmd) = &self.restart_cmd {
                    let started = Instant::now();
                    let at_ns = shared.now_ns();
                    let status = Command::new("sh")
                        .args(["-c", cmd])
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .status();
                    if !matches!(status, Ok(s) if s.success()) {
                        eprintln!("baton-torture: the restart command `{cmd}` failed: {status:?}");
                    }
                    lock(&shared.events).push(Event {
                        fault,
                        at_ns,
                        who: None,
                        lasted: started.elapsed(),
                    });
                }
            }
            Fault::ProxyDrop => {
                if let Some(proxy) = &self.proxy {
                    proxy.drop_connections();
                    shared.record(fault, None, Duration::ZERO);
                }
            }
            Fault::ProxyHole => {
                if let Some(proxy) = &self.proxy {
                    proxy.black_hole(self.hole);
                    shared.record(fault, None, self.hole);
                }
            }
            Fault::ProxyLatency => {
                if let Some(proxy) = &self.proxy {
                    let latency = self
                        .schedule
                        .between(Duration::from_millis(5), Duration::from_millis(50));
                    let lasted = Duration::from_secs(3);
                    proxy.set_latency(latency);
                    shared.record(fault, None, lasted);
                    let proxy = proxy.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(lasted);
                        proxy.set_latency(Duration::ZERO);
                    });
                }
            }
        }
    }

    /// Processes already hit (killed, or paused and not yet continued): not hit again.
    fn untouchable(&self) -> HashSet<String> {
        let mut hit = lock(&self.shared.killed).clone();
        hit.extend(lock(&self.shared.paused).iter().map(|(who, _)| who.clone()));
        hit
    }

    /// The holders now whose processes run and were not hit yet (sorted, for the seed), and
    /// the running processes.
    ///
    /// Waits up to 3 s for one: holds are short, and a fault meant for a holder should not
    /// fall on the gaps between them.
    fn live_holders(&self) -> (Vec<Holder>, HashMap<String, Running>) {
        let give_up = Instant::now() + Duration::from_secs(3);
        loop {
            let holders = lock(&self.shared.resource).holders();
            let running = lock(&self.shared.running).clone();
            let untouchable = self.untouchable();
            let live: Vec<Holder> = holders
                .into_iter()
                .filter(|h| running.contains_key(&h.who) && !untouchable.contains(&h.who))
                .collect();
            if !live.is_empty()
                || Instant::now() >= give_up
                || self.shared.done.load(Ordering::SeqCst)
            {
                return (live, running);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn kill(&self, who: &str, pid: i32) {
        lock(&self.shared.killed).insert(who.to_owned());
        signal(pid, libc::SIGKILL);
    }

    /// Stops `top` and the worker's process group for `pause`, then continues them (the
    /// worker first: the harder case for the fence, as the command may write before `baton
    /// run` sees its lease is gone).
    fn pause(&self, who: &str, top: i32, worker: Option<i32>, pause: Duration) {
        let mut pids = vec![top];
        if let Some(worker) = worker.filter(|&w| w != top) {
            pids.insert(0, -worker);
        }
        for &pid in pids.iter().rev() {
            signal(pid, libc::SIGSTOP);
        }
        lock(&self.shared.paused).push((who.to_owned(), pids.clone()));
        let shared = self.shared.clone();
        let who = who.to_owned();
        std::thread::spawn(move || {
            std::thread::sleep(pause);
            let mut paused = lock(&shared.paused);
            if let Some(at) = paused.iter().position(|(w, _)| *w == who) {
                for pid in paused.remove(at).1 {
                    signal(pid, libc::SIGCONT);
                }
            }
        });
    }

    /// Stops running client processes one after another until one is caught holding SQLite's
    /// write lock (the kernel's lock table says so: [`holds_sqlite_write_lock`]), then keeps
    /// that one stopped past the TTL. Each miss is continued at once (a stop of microseconds).
    fn pause_in_transaction(&mut self) {
        let Some(path) = self.store.strip_prefix("sqlite:") else {
            return;
        };
        let path = path.split('?').next().unwrap_or(path).to_owned();
        let give_up = Instant::now() + Duration::from_secs(3);
        while Instant::now() < give_up && !self.shared.done.load(Ordering::SeqCst) {
            let untouchable = self.untouchable();
            let mut running: Vec<(String, Running)> = lock(&self.shared.running)
                .iter()
                .filter(|(w, _)| !untouchable.contains(*w))
                .map(|(w, r)| (w.clone(), *r))
                .collect();
            running.sort_by(|a, b| a.0.cmp(&b.0));
            let Some(i) = self.schedule.pick(running.len()) else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let (who, victim) = running.swap_remove(i);
            signal(victim.pid, libc::SIGSTOP);
            // kill(2) returns before the process stops: a thread still running could finish
            // its transaction after the lock table was read.
            if all_threads_stopped(victim.pid) && holds_sqlite_write_lock(victim.pid, &path) {
                // Still stopped: it stays so, inside its transaction, until the pause is over.
                let pause = self.ttl + Duration::from_secs(1);
                self.shared
                    .record(Fault::PauseInTransaction, Some(who.clone()), pause);
                self.pause(&who, victim.pid, None, pause);
                return;
            }
            signal(victim.pid, libc::SIGCONT);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Waits (100 ms at most) until every thread of `pid` is stopped (`T` in its
/// `/proc/PID/task/TID/stat`); false if one still runs.
fn all_threads_stopped(pid: i32) -> bool {
    let give_up = Instant::now() + Duration::from_millis(100);
    loop {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        let running = tasks.flatten().any(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // The state follows the command name, which is in parentheses and may hold spaces.
            let state = stat
                .rsplit(") ")
                .next()
                .and_then(|rest| rest.chars().next());
            !matches!(state, Some('T' | 't'))
        });
        if !running {
            return true;
        }
        if Instant::now() >= give_up {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether process `pid` holds SQLite's write lock on the database at `path`, by the kernel's
/// table of POSIX locks (`/proc/locks`: `N: POSIX ADVISORY WRITE PID MAJ:MIN:INODE START END`).
/// In WAL mode the writer holds byte 120 of `PATH-shm` (`WAL_WRITE_LOCK`); in rollback mode, the
/// database's RESERVED byte (`PENDING_BYTE + 1` = 0x40000001). Waiting requests (`->`) are not
/// held locks.
fn holds_sqlite_write_lock(pid: i32, path: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let inode = |p: &str| std::fs::metadata(p).ok().map(|m| m.ino());
    let (shm, db) = (inode(&format!("{path}-shm")), inode(path));
    let Ok(table) = std::fs::read_to_string("/proc/locks") else {
        return false;
    };
    let pid = pid.to_string();
    table.lines().any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[1] != "POSIX" || f[3] != "WRITE" || f[4] != pid {
            return false;
        }
        let held = f[5].rsplit(':').next().and_then(|i| i.parse::<u64>().ok());
        let (Ok(start), end) = (f[6].parse::<u64>(), f[7].parse::<u64>().unwrap_or(u64::MAX))
        else {
            return false;
        };
        let covers = |byte: u64| start <= byte && byte <= end;
        (held.is_some() && held == shm && covers(120))
            || (held.is_some() && held == db && covers(0x4000_0001))
    })
}

/// Takeover times after holders were killed or paused.
struct Takeovers {
    /// (ms, disturbed by a store or network fault at the same time).
    samples: Vec<(u64, bool)>,
    late: Vec<Violation>,
}

impl Takeovers {
    fn json(&self) -> Value {
        let mut clean: Vec<u64> = self
            .samples
            .iter()
            .filter(|(_, d)| !d)
            .map(|(ms, _)| *ms)
            .collect();
        clean.sort_unstable();
        let at = |q: f64| -> Option<u64> {
            if clean.is_empty() {
                return None;
            }
            let i = ((clean.len() as f64 - 1.0) * q).round() as usize;
            clean.get(i).copied()
        };
        json!({
            "samples": clean.len(),
            "disturbed": self.samples.len() - clean.len(),
            "p50": at(0.5),
            "p99": at(0.99),
            "max": clean.last(),
        })
    }
}

/// For every holder killed or paused at t: the time to the next hold of the key by another
/// client, against the bound: the TTL, plus one claim window for each waiter killed in the
/// window that could have been ahead, plus the longest poll interval (with its jitter), plus
/// the slack for starting a process. A takeover during a store or network fault is reported
/// but not held to the bound (the store itself was away).
fn takeovers(
    config: &Config,
    events: &[Event],
    intervals: &[Interval],
    history: &[Entry],
    key_of: &HashMap<&str, &str>,
) -> Takeovers {
    // A holder is picked while its hold is open and hit a moment later: if it released in
    // between, its ticket did not end by running out, and what follows is no takeover.
    let expired: HashSet<&str> = history
        .iter()
        .filter(|e| e.outcome == "expired")
        .map(|e| e.who.as_str())
        .collect();
    let mut by_start: Vec<&Interval> = intervals.iter().collect();
    by_start.sort_by_key(|i| i.start_ns);
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let mut result = Takeovers {
        samples: Vec::new(),
        late: Vec::new(),
    };
    for event in events.iter().filter(|e| e.fault.hits_holder()) {
        let victim = event.who.as_deref().unwrap_or("");
        if !expired.contains(victim) {
            continue;
        }
        let key = key_of.get(victim).copied().unwrap_or("");
        let Some(next) = by_start
            .iter()
            .find(|i| i.start_ns > event.at_ns && i.who != victim && i.key == key)
        else {
            continue;
        };
        let took_ns = next.start_ns - event.at_ns;
        let took_ms = took_ns / 1_000_000;
        let window_start = event.at_ns.saturating_sub(
            u64::try_from((config.waiter_ttl + config.claim()).as_nanos()).unwrap_or(0),
        );
        let window_end = next.start_ns;
        let dead_waiters = events
            .iter()
            .filter(|e| {
                e.fault == Fault::KillWaiter && e.at_ns >= window_start && e.at_ns <= window_end
            })
            .count() as u32;
        let disturbed = events.iter().any(|e| {
            !e.fault.hits_holder()
                && e.fault != Fault::KillWaiter
                && e.at_ns <= window_end
                && e.at_ns
                    + u64::try_from(e.lasted.as_nanos()).unwrap_or(0)
                    + u64::try_from(config.ttl.as_nanos()).unwrap_or(0)
                    >= event.at_ns
        });
        let bound = config.ttl
            + config.claim() * dead_waiters
            + config.poll_max.mul_f64(1.2)
            + config.takeover_slack;
        result.samples.push((took_ms, disturbed));
        if !disturbed && took_ms > ms(bound) {
            result.late.push(Violation::LateTakeover {
                after: format!(
                    "{} {} ({dead_waiters} waiters killed around it)",
                    event.fault.name(),
                    victim
                ),
                took_ms,
                bound_ms: ms(bound),
            });
        }
    }
    result
}

/// After the run: waits (with `baton run` turns that take every permit) until every dead
/// ticket has lapsed, then reads the key's history and whatever is still live.
fn sweep(config: &Config, key: &KeyPlan, log: &File) -> Result<(Vec<Entry>, Vec<String>), String> {
    let limit = key.limit.to_string();
    let ttl = format!("{}ms", config.ttl.as_millis());
    // Held long enough that a dead holder's lease and a dead waiter's grant lapse while the
    // sweep holds: observation-judged stores need a full phase seen unchanged.
    let hold = config.ttl.max(config.waiter_ttl).max(config.claim()) + Duration::from_secs(1);
    let sleep = format!("{:.1}", hold.as_secs_f64());
    let give_up = Instant::now() + Duration::from_secs(180);
    let mut live = Vec::new();
    let mut round = 0;
    while Instant::now() < give_up {
        let sweepers: Vec<_> = (0..key.limit)
            .map(|i| {
                Command::new(&config.baton)
                    .args(["run", &key.name, "--quiet", "--store", &config.store])
                    .args(["--limit", &limit, "--ttl", &ttl, "--timeout", "120s"])
                    .args(["--context", &format!("sweep-{round}-{i}")])
                    .args(["--", "sleep", &sleep])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log.try_clone().map_or(Stdio::null(), Stdio::from))
                    .spawn()
            })
            .collect();
        for sweeper in sweepers.into_iter().flatten() {
            let mut sweeper = sweeper;
            let _ = sweeper.wait();
        }
        let status = baton_ok(config, &config.store, &["status", &key.name, "--json"], log)?;
        let status: Value = serde_json::from_str(&status)
            .map_err(|e| format!("cannot read `baton status --json`: {e}"))?;
        live = status["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|k| k["key"] == key.name.as_str())
            .flat_map(|k| {
                let holders = k["holders"].as_array().cloned().unwrap_or_default();
                let queue = k["queue"].as_array().cloned().unwrap_or_default();
                holders.into_iter().chain(queue)
            })
            .map(|t| {
                format!(
                    "{} ({})",
                    t["id"].as_str().unwrap_or("?"),
                    t["context"].as_str().unwrap_or("")
                )
            })
            .collect();
        if live.is_empty() {
            break;
        }
        round += 1;
    }
    let log_json = baton_ok(
        config,
        &config.store,
        &["log", &key.name, "--json", "-n", "10000"],
        log,
    )?;
    let mut history = Vec::new();
    for line in log_json.lines().filter(|l| !l.trim().is_empty()) {
        let entry: Value = serde_json::from_str(line)
            .map_err(|e| format!("cannot read a line of `baton log --json`: {e}: {line}"))?;
        if let Some(error) = entry.get("error") {
            return Err(format!("the history holds an unreadable entry: {error}"));
        }
        history.push(Entry {
            ticket: entry["id"].as_str().unwrap_or_default().to_owned(),
            who: entry["context"].as_str().unwrap_or_default().to_owned(),
            outcome: entry["outcome"].as_str().unwrap_or_default().to_owned(),
            fence: entry["fence"].as_u64(),
            arrival: entry["arrival"].as_u64().unwrap_or(0),
        });
    }
    if history.len() >= 10_000 {
        return Err(
            "the history has 10,000 entries or more, more than `baton log` prints: \
                    run fewer turns per key"
                .into(),
        );
    }
    Ok((history, live))
}
