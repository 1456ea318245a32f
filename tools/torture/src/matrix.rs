//! `baton-torture matrix`: every store the test scripts started, under the faults that store
//! can be given, one run each, and the summary table.
//!
//! The stores come from the environment `scripts/with-servers.sh` exports (a fresh SQLite file
//! always; PostgreSQL, Redis and etcd with their restart fault; S3 and DynamoDB on moto, which
//! keeps nothing across a restart, with network faults instead). Every store reached over the
//! network runs behind the fault proxy and gets its reply faults (a lost answer to a write, a
//! client stopped between its write landing and its reading the answer); SQLite is a file, with
//! no connection to put a proxy on. The test command runs it with a short `--duration`; the
//! soak is the same with a long one (see TORTURE.md).

use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_torture::faults::Fault;
use serde_json::Value;

use crate::harness::{self, ClientKind, Config, Kind, Work};

/// One run of the matrix.
struct Case {
    /// The store URL, or for [`Case::behind_servers`] the store the servers serve.
    store: String,
    /// Run the clients through two `baton serve` processes in front of `store`, spread over
    /// both; the `restart` fault is then a `kill -9` of one of them, started again.
    behind_servers: bool,
    kind: Kind,
    client: ClientKind,
    faults: Vec<Fault>,
    restart_cmd: Option<String>,
    skew: Option<Duration>,
    /// What the clients do.
    work: Work,
    /// Client threads, when not the usual number (a queue longer than a key's window).
    clients: Option<usize>,
    /// Library clients enqueue by arrival on keys they saw held.
    by_arrival: bool,
}

/// Clients of a long-queue run: more than a key's window (16 waiting), its backlog's segment
/// (32) and a tail, so that turns wait in written segments.
const LONG_QUEUE_CLIENTS: usize = 56;

/// Every fault a server that can be restarted gets.
fn server_faults() -> Vec<Fault> {
    use Fault::*;
    vec![
        KillHolder,
        KillWaiter,
        PauseHolder,
        Restart,
        ProxyDrop,
        ProxyHole,
        ProxyLoseReply,
        StopBeforeReply,
    ]
}

/// Every run for the stores in the environment.
fn cases(scratch: &Path, restart: &Path) -> Vec<Case> {
    use Fault::*;
    let sqlite = |name: &str| format!("sqlite:{}", scratch.join(name).display());
    let restart_of = |server: &str| Some(format!("{} {server} --kill", restart.display()));
    let mut cases = vec![
        Case {
            store: sqlite("mutex.db"),
            kind: Kind::Mutex,
            client: ClientKind::Mixed,
            faults: vec![KillHolder, KillWaiter, PauseHolder, PauseInTransaction],
            restart_cmd: None,
            skew: None,
            behind_servers: false,
            work: Work::Locks,
            clients: None,
            by_arrival: false,
        },
        // Turns kept alive by a keeper process, as CI jobs take them: killed and paused with
        // their clients.
        Case {
            store: sqlite("kept.db"),
            kind: Kind::Mutex,
            client: ClientKind::Kept,
            faults: vec![KillHolder, KillWaiter, PauseHolder],
            restart_cmd: None,
            skew: None,
            behind_servers: false,
            work: Work::Locks,
            clients: None,
            by_arrival: false,
        },
        // Turns through two `baton serve` on one SQLite file, taken with the turns API as the
        // clients of other languages take them: the servers wait, the clients keep only the
        // one rule; a server killed with its waits attached.
        Case {
            store: sqlite("turns.db"),
            kind: Kind::Mutex,
            client: ClientKind::Turns,
            faults: vec![KillHolder, KillWaiter, PauseHolder, Restart],
            restart_cmd: None,
            skew: None,
            behind_servers: true,
            work: Work::Locks,
            clients: None,
            by_arrival: false,
        },
        Case {
            store: sqlite("mixed.db"),
            kind: Kind::Mixed,
            client: ClientKind::Mixed,
            faults: vec![KillHolder, KillWaiter],
            restart_cmd: None,
            skew: None,
            behind_servers: false,
            work: Work::Locks,
            clients: None,
            by_arrival: false,
        },
        // A queue longer than the window: turns wait in the backlog's tail and written
        // segments, and are killed, paused and stopped mid-write there.
        Case {
            store: sqlite("long.db"),
            kind: Kind::Mutex,
            client: ClientKind::Mixed,
            faults: vec![KillWaiter, PauseHolder, PauseInTransaction],
            restart_cmd: None,
            skew: None,
            behind_servers: false,
            work: Work::Locks,
            clients: Some(LONG_QUEUE_CLIENTS),
            by_arrival: false,
        },
    ];
    let servers = [
        ("BATON_TEST_POSTGRES_URL", "postgres", false),
        ("BATON_TEST_REDIS_URL", "redis", false),
        ("BATON_TEST_ETCD_URL", "etcd", false),
        // Library clients that enqueue by arrival on a key they saw held, on the stores that
        // keep arrivals: appends whose answers are lost, appenders killed with their arrival
        // pending, holders killed with arrivals behind them, restarts between an append and
        // its intake.
        ("BATON_TEST_ETCD_URL", "etcd", true),
        ("BATON_TEST_REDIS_URL", "redis", true),
    ];
    for (variable, server, by_arrival) in servers {
        if let Ok(url) = std::env::var(variable) {
            cases.push(Case {
                store: url,
                kind: Kind::Mixed,
                client: ClientKind::Mixed,
                faults: server_faults(),
                restart_cmd: restart_of(server),
                // Leases are judged on the server's clock: clients' clocks must not matter.
                skew: Some(Duration::from_secs(30)),
                behind_servers: false,
                work: Work::Locks,
                clients: None,
                by_arrival,
            });
        }
    }
    // The long queue on a server, under every fault a server gets: lost and held-back replies
    // to writes into the backlog, restarts between a segment's write and the document's.
    if let Ok(url) = std::env::var("BATON_TEST_POSTGRES_URL") {
        cases.push(Case {
            store: url,
            kind: Kind::Mutex,
            client: ClientKind::Mixed,
            faults: server_faults(),
            restart_cmd: restart_of("postgres"),
            skew: Some(Duration::from_secs(30)),
            behind_servers: false,
            work: Work::Locks,
            clients: Some(LONG_QUEUE_CLIENTS),
            by_arrival: false,
        });
    }
    // Two `baton serve` on one PostgreSQL store, each client going to one first and to the
    // other when it fails: servers killed with clients attached.
    if let Ok(url) = std::env::var("BATON_TEST_POSTGRES_URL") {
        cases.push(Case {
            store: url,
            kind: Kind::Mixed,
            client: ClientKind::Mixed,
            faults: vec![KillHolder, KillWaiter, PauseHolder, Restart],
            restart_cmd: None,
            skew: Some(Duration::from_secs(30)),
            behind_servers: true,
            work: Work::Locks,
            clients: None,
            by_arrival: false,
        });
    }
    let listed = std::env::var("BATON_TEST_STORES").unwrap_or_default();
    for url in listed.split(',') {
        if url.starts_with("s3://") || url.starts_with("dynamodb://") {
            cases.push(Case {
                store: url.to_owned(),
                kind: Kind::Mixed,
                client: ClientKind::Mixed,
                faults: vec![
                    KillHolder,
                    KillWaiter,
                    PauseHolder,
                    ProxyDrop,
                    ProxyHole,
                    ProxyLatency,
                    ProxyLoseReply,
                    StopBeforeReply,
                ],
                restart_cmd: None,
                // DynamoDB judges leases by observation, S3 on the server's `Date`: neither
                // may depend on the clients' clocks.
                skew: Some(Duration::from_secs(30)),
                behind_servers: false,
                work: Work::Locks,
                clients: None,
                by_arrival: false,
            });
        }
    }
    cases
}

/// The work half's runs: on every store of the lock runs, under the same faults, job workers,
/// `baton once` callers and shared-value increments at once (one SQLite run, with a pause
/// inside a write transaction too).
fn work_cases(scratch: &Path, restart: &Path) -> Vec<Case> {
    let mut cases = vec![Case {
        store: format!("sqlite:{}", scratch.join("work.db").display()),
        kind: Kind::Mutex,
        client: ClientKind::Cli,
        faults: vec![
            Fault::KillHolder,
            Fault::KillWaiter,
            Fault::PauseHolder,
            Fault::PauseInTransaction,
        ],
        restart_cmd: None,
        skew: None,
        behind_servers: false,
        work: Work::All,
        clients: None,
        by_arrival: false,
    }];
    cases.extend(
        self::cases(scratch, restart)
            .into_iter()
            .filter(|case| {
                !case.store.starts_with("sqlite:") && case.clients.is_none() && !case.by_arrival
            })
            .map(|case| Case {
                work: Work::All,
                ..case
            }),
    );
    cases
}

/// Runs the matrix; prints each run's summary as a JSON line, then the table. Violations make
/// the result an error (exit 1).
pub fn run(
    baton: PathBuf,
    duration: Duration,
    seed: u64,
    restart: &Path,
    only: &[String],
    works: &[String],
) -> Result<bool, String> {
    let own = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let scratch = tempdir()?;
    let mut summaries = Vec::new();
    let mut clean = true;
    let mut all = Vec::new();
    for work in works {
        match work.as_str() {
            "locks" => all.extend(cases(&scratch, restart)),
            "work" => all.extend(work_cases(&scratch, restart)),
            other => {
                return Err(format!(
                    "--work {other}: the choices are locks and work (both: --work locks,work)"
                ))
            }
        }
    }
    for (n, case) in all.into_iter().enumerate() {
        let scheme = case.store.split(':').next().unwrap_or_default();
        let scheme = if case.behind_servers { "http" } else { scheme };
        if !only.is_empty() && !only.iter().any(|o| o == scheme) {
            continue;
        }
        let servers = match case.behind_servers {
            true => Some(ServePair::start(
                &baton,
                &case.store,
                &scratch.join(format!("serve-{n}")),
            )?),
            false => None,
        };
        let config = Config {
            store: servers.as_ref().map_or(case.store, ServePair::url),
            baton: baton.clone(),
            own: own.clone(),
            // Mixed runs spread their clients over their keys.
            clients: match case.clients {
                Some(n) => n,
                None if case.kind == Kind::Mixed || case.work != Work::Locks => 6,
                None => 4,
            },
            rounds: 0,
            duration: Some(duration),
            kind: case.kind,
            // A mixed lock run has a mutex, a semaphore, a shared key and a pool.
            keys: match (case.kind, case.work) {
                (_, work) if work != Work::Locks => 3,
                (Kind::Mixed, _) => 4,
                _ => 1,
            },
            limit: 2,
            hold: Duration::from_millis(50),
            client: case.client,
            ttl: Duration::from_secs(2),
            waiter_ttl: Duration::from_secs(3),
            poll_min: Duration::from_millis(100),
            poll_max: Duration::from_millis(500),
            seed: seed + n as u64,
            faults: case.faults,
            every: Duration::from_secs(1),
            hole: Duration::from_secs(3),
            restart_cmd: servers
                .as_ref()
                .map(ServePair::kill_one)
                .or(case.restart_cmd),
            skew: case.skew,
            takeover_slack: Duration::from_secs(2),
            key: format!("torture/matrix-{}-{n}", std::process::id()),
            unprotected: false,
            work: case.work,
            by_arrival: case.by_arrival,
        };
        let verdict = harness::run(&config);
        drop(servers);
        let verdict = verdict?;
        println!("{}", verdict.summary);
        for violation in &verdict.violations {
            eprintln!("violation ({}): {violation:?}", config.store);
        }
        clean &= verdict.violations.is_empty();
        summaries.push(verdict.summary);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    println!();
    print!("{}", table(&summaries));
    Ok(clean)
}

/// Two `baton serve` processes on loopback in front of one store, started and killed by a
/// script of their own (`start`, `kill-one`: a `kill -9` of one, in turn, started again on its
/// port; `stop`), so that the fault injector runs a kill as it runs a store's restart.
struct ServePair {
    script: PathBuf,
    ports: [u16; 2],
}

const SERVE_PAIR_SCRIPT: &str = r#"#!/bin/sh
# start | kill-one | stop: two baton serve processes (written by baton-torture matrix).
set -u
start_one() {
    setsid "$BATON" --store "$STORE" serve --listen "127.0.0.1:$1" --poll 100ms \
        >>"$DIR/serve-$1.log" 2>&1 </dev/null &
    echo $! >"$DIR/serve-$1.pid"
    for _ in $(seq 200); do
        # A prefix no key has: the probe lists nothing, however many keys the store holds.
        "$BATON" --store "http://127.0.0.1:$1" status baton-torture-probe/ --json \
            >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "baton serve on port $1 did not start" >&2
    return 1
}
kill_port() { kill -9 "$(cat "$DIR/serve-$1.pid")" 2>/dev/null || true; }
case "$1" in
start) start_one "$PORT_A" && start_one "$PORT_B" ;;
kill-one)
    n=$(cat "$DIR/kills" 2>/dev/null || echo 0)
    if [ $((n % 2)) -eq 0 ]; then port=$PORT_A; else port=$PORT_B; fi
    echo $((n + 1)) >"$DIR/kills"
    kill_port "$port"
    sleep 0.5
    start_one "$port" ;;
stop) kill_port "$PORT_A"; kill_port "$PORT_B" ;;
esac
"#;

impl ServePair {
    fn start(baton: &Path, store: &str, dir: &Path) -> Result<ServePair, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let free_port = || -> Result<u16, String> {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")
                .map_err(|e| format!("cannot find a free port: {e}"))?;
            Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
        };
        let ports = [free_port()?, free_port()?];
        let quote = |text: &str| format!("'{}'", text.replace('\'', r"'\''"));
        let script = format!(
            "BATON={}\nSTORE={}\nDIR={}\nPORT_A={}\nPORT_B={}\n{SERVE_PAIR_SCRIPT}",
            quote(&baton.display().to_string()),
            quote(store),
            quote(&dir.display().to_string()),
            ports[0],
            ports[1]
        );
        let path = dir.join("serve-pair.sh");
        std::fs::write(&path, script)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let pair = ServePair {
            script: path,
            ports,
        };
        let status = std::process::Command::new("sh")
            .arg(&pair.script)
            .arg("start")
            .status()
            .map_err(|e| format!("cannot run {}: {e}", pair.script.display()))?;
        if !status.success() {
            return Err(format!("the servers did not start (see {})", dir.display()));
        }
        Ok(pair)
    }

    /// The store URL of half the clients; the harness turns it around for the other half.
    fn url(&self) -> String {
        format!(
            "http://127.0.0.1:{},127.0.0.1:{}",
            self.ports[0], self.ports[1]
        )
    }

    fn kill_one(&self) -> String {
        format!("sh '{}' kill-one", self.script.display())
    }
}

impl Drop for ServePair {
    fn drop(&mut self) {
        let _ = std::process::Command::new("sh")
            .arg(&self.script)
            .arg("stop")
            .status();
    }
}

fn tempdir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("baton-torture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// The summary table (Markdown) of runs' summaries.
pub fn table(summaries: &[Value]) -> String {
    let is_locks = |s: &&Value| s["work"].as_str().is_none_or(|w| w == "locks");
    let (locks, work): (Vec<&Value>, Vec<&Value>) = summaries.iter().partition(is_locks);
    let mut out = String::new();
    if !locks.is_empty() {
        out.push_str(&locks_table(&locks));
    }
    if !work.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&work_table(&work));
    }
    out
}

/// The store column: its scheme, or what the servers stand in front of.
fn store_name(summary: &Value) -> &str {
    let store = summary["store"].as_str().unwrap_or("?");
    match store.split(':').next().unwrap_or(store) {
        // The turns clients' servers stand on SQLite, the others' on PostgreSQL.
        "http" if summary["client"] == "turns" => "2 × baton serve, one SQLite (turns API)",
        "http" => "2 × baton serve, one PostgreSQL",
        "etcd" if summary["by_arrival"] == true => "etcd (library turns by arrival)",
        "redis" if summary["by_arrival"] == true => "redis (library turns by arrival)",
        scheme => scheme,
    }
}

/// The faults column: each fault injected and how often.
fn injected(summary: &Value) -> String {
    let injected = summary["injected"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    if injected.is_empty() {
        "none".into()
    } else {
        injected
    }
}

/// The work half's table: per run, what the jobs, run-once keys and values came to.
fn work_table(summaries: &[&Value]) -> String {
    let mut out = String::from(
        "| store | faults injected | skew | jobs: succeeded / dead (runs; recorded, not run) | \
         submits (already; failed) | retries (queued) | once keys: callers, runs, successes | kv: values, \
         increments landed / unknown / killed / failed, applied | fenced off | violations |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in summaries {
        let w = &s["work_half"];
        let (jobs, once, kv) = (&w["jobs"], &w["once"], &w["kv"]);
        let increments = &kv["increments"];
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        let failed: u64 = increments
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| !["exit 0", "exit 5", "killed"].contains(&k.as_str()))
                    .map(|(_, v)| n(v))
                    .sum()
            })
            .unwrap_or(0);
        out.push_str(&format!(
            "| {} | {} | {} | {} / {} ({}; {}) | {} ({}; {}) | {} ({}) | {}: {}, {}, {} | {}, {} / {} / {} / {}, {} | {} | {} |\n",
            store_name(s),
            injected(s),
            s["skew_s"]
                .as_u64()
                .map_or("-".to_owned(), |n| format!("±{n} s")),
            jobs["succeeded"],
            jobs["dead"],
            jobs["runs"],
            jobs["recorded_not_run"],
            jobs["submits"],
            jobs["already"],
            jobs["submits_failed"],
            jobs["retries"],
            jobs["retries_queued"],
            once["keys"],
            once["callers"],
            once["runs"],
            once["succeeded"],
            kv["values"],
            n(&increments["exit 0"]),
            n(&increments["exit 5"]),
            n(&increments["killed"]),
            failed,
            kv["applied"],
            s["fenced_off"],
            s["violations"],
        ));
    }
    out
}

/// The lock runs' table.
fn locks_table(summaries: &[&Value]) -> String {
    let mut out = String::from(
        "| store | keys | clients | faults injected | skew | turns | violations | lost | \
         fenced off | takeover p50 / p99 / max ms (n) | most waiting: window, backlog |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in summaries {
        let scheme = store_name(s);
        let t = &s["takeover_ms"];
        let ms = |v: &Value| v.as_u64().map_or("-".to_owned(), |n| n.to_string());
        out.push_str(&format!(
            "| {scheme} | {} | {} {} | {} | {} | {} | {} | {} | {} | {} / {} / {} ({}) | {}, {} |\n",
            match s["keys"].as_u64() {
                Some(n) if n > 1 => format!("{} ×{n}", s["kind"].as_str().unwrap_or("?")),
                _ => s["kind"].as_str().unwrap_or("?").to_owned(),
            },
            s["clients"],
            s["client"].as_str().unwrap_or("?"),
            injected(s),
            s["skew_s"]
                .as_u64()
                .map_or("-".to_owned(), |n| format!("±{n} s")),
            s["turns"],
            s["violations"],
            s["lost"],
            s["fenced_off"],
            ms(&t["p50"]),
            ms(&t["p99"]),
            ms(&t["max"]),
            t["samples"],
            ms(&s["queues"]["window_max"]),
            ms(&s["queues"]["backlog_max"]),
        ));
    }
    out
}
