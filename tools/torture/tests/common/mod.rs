//! What the two fault-run tests share: `baton-torture matrix` on test servers of its own.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The servers a fault run restarts, cuts off and loads: started for the run alone, so that
/// none of it reaches another test's server and the run can go on beside other tests.
const SERVERS: &str = "postgres,redis,etcd,moto";

/// The stores every matrix run covers, by the scheme of its summary's `store` (`http`: through
/// two `baton serve`).
const SCHEMES: [&str; 7] = [
    "sqlite", "postgres", "redis", "etcd", "http", "s3", "dynamodb",
];

/// What a matrix printed: its standard error, and a summary per run (its JSON lines).
pub struct Matrix {
    pub stderr: String,
    pub summaries: Vec<Value>,
}

/// `baton-torture matrix ARGS --restart-script scripts/restart-server.sh`, run by
/// `scripts/with-servers.sh` with servers of its own on fresh ports and data; it must succeed
/// and have run on every store. The environment of the servers the test command started
/// (`BATON_TEST_*`) is left out, or their URLs would join the new ones in the store list.
pub fn matrix(args: &[&str]) -> Matrix {
    let torture = PathBuf::from(env!("CARGO_BIN_EXE_baton-torture"));
    assert!(
        torture.with_file_name("baton").is_file(),
        "run `cargo build --workspace` first (scripts/test.sh does)"
    );
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
    let mut command = Command::new(scripts.join("with-servers.sh"));
    command
        .args(["--only", SERVERS])
        .arg(&torture)
        .arg("matrix")
        .args(args)
        .arg("--restart-script")
        .arg(scripts.join("restart-server.sh"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BATON_TEST_") {
            command.env_remove(name);
        }
    }
    // The restart fault kills Redis: under its default fsync policy it may come back without
    // writes it acknowledged (scripts/servers/redis.sh says when), which baton cannot keep.
    command.env("BATON_TEST_REDIS_FSYNC", "always");
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/with-servers.sh: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    println!("{stdout}");
    // The violations last: an excerpt of a long failure that keeps its head and its tail
    // still names them.
    let violations: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("violation ("))
        .collect();
    assert!(
        output.status.success(),
        "{stdout}\n{stderr}\n--- the violations again:\n{}",
        violations.join("\n")
    );
    let summaries: Vec<Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for scheme in SCHEMES {
        assert!(
            summaries.iter().any(|s| s["store"]
                .as_str()
                .is_some_and(|store| store.starts_with(&format!("{scheme}:")))),
            "no run on {scheme}: {stdout}\n{stderr}"
        );
    }
    Matrix { stderr, summaries }
}
