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

use crate::harness::{self, ClientKind, Config, Kind};

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
        },
        Case {
            store: sqlite("mixed.db"),
            kind: Kind::Mixed,
            client: ClientKind::Mixed,
            faults: vec![KillHolder, KillWaiter],
            restart_cmd: None,
            skew: None,
            behind_servers: false,
        },
    ];
    let servers = [
        ("BATON_TEST_POSTGRES_URL", "postgres"),
        ("BATON_TEST_REDIS_URL", "redis"),
        ("BATON_TEST_ETCD_URL", "etcd"),
    ];
    for (variable, server) in servers {
        if let Ok(url) = std::env::var(variable) {
            cases.push(Case {
                store: url,
                kind: Kind::Mixed,
                client: ClientKind::Mixed,
                faults: vec![
                    KillHolder,
                    KillWaiter,
                    PauseHolder,
                    Restart,
                    ProxyDrop,
                    ProxyHole,
                    ProxyLoseReply,
                    StopBeforeReply,
                ],
                restart_cmd: restart_of(server),
                // Leases are judged on the server's clock: clients' clocks must not matter.
                skew: Some(Duration::from_secs(30)),
                behind_servers: false,
            });
        }
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
            });
        }
    }
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
) -> Result<bool, String> {
    let own = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let scratch = tempdir()?;
    let mut summaries = Vec::new();
    let mut clean = true;
    for (n, case) in cases(&scratch, restart).into_iter().enumerate() {
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
            // Mixed runs spread their clients over three keys.
            clients: if case.kind == Kind::Mixed { 6 } else { 4 },
            rounds: 0,
            duration: Some(duration),
            kind: case.kind,
            keys: if case.kind == Kind::Mixed { 3 } else { 1 },
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
    let mut out = String::from(
        "| store | keys | clients | faults injected | skew | turns | violations | lost | \
         fenced off | takeover p50 / p99 / max ms (n) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in summaries {
        let store = s["store"].as_str().unwrap_or("?");
        let scheme = match store.split(':').next().unwrap_or(store) {
            "http" => "2 × baton serve, one PostgreSQL",
            scheme => scheme,
        };
        let injected = s["injected"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let t = &s["takeover_ms"];
        let ms = |v: &Value| v.as_u64().map_or("-".to_owned(), |n| n.to_string());
        out.push_str(&format!(
            "| {scheme} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} ({}) |\n",
            match s["keys"].as_u64() {
                Some(n) if n > 1 => format!("{} ×{n}", s["kind"].as_str().unwrap_or("?")),
                _ => s["kind"].as_str().unwrap_or("?").to_owned(),
            },
            s["client"].as_str().unwrap_or("?"),
            if injected.is_empty() {
                "none".into()
            } else {
                injected
            },
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
        ));
    }
    out
}
