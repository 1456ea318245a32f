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
    store: String,
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
        },
        Case {
            store: sqlite("mixed.db"),
            kind: Kind::Mixed,
            client: ClientKind::Mixed,
            faults: vec![KillHolder, KillWaiter],
            restart_cmd: None,
            skew: None,
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
            });
        }
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
        if !only.is_empty() && !only.iter().any(|o| o == scheme) {
            continue;
        }
        let config = Config {
            store: case.store,
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
            restart_cmd: case.restart_cmd,
            skew: case.skew,
            takeover_slack: Duration::from_secs(2),
            key: format!("torture/matrix-{}-{n}", std::process::id()),
            unprotected: false,
        };
        let verdict = harness::run(&config)?;
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
        let scheme = store.split(':').next().unwrap_or(store);
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
