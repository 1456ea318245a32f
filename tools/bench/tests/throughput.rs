//! `baton-bench throughput`, in runs far too short for their figures to mean anything: what
//! each run cycles, and that it counts its store's requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

/// Runs `baton-bench throughput ARGS --json` on a fresh SQLite file (no test server's URL).
fn throughput(args: &[&str]) -> (Option<i32>, Value, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_baton-bench"));
    command.args(["throughput", "--json"]).args(args);
    for store in ["POSTGRES", "REDIS", "ETCD", "S3", "DYNAMODB"] {
        command.env_remove(format!("BATON_TEST_{store}_URL"));
    }
    let output = command.output().expect("baton-bench runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let report = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output.status.code(), report, stderr)
}

/// `--replay` cycles baton's two writes through the store alone, two CASes a cycle and no
/// read, as the library's cycle costs; the report says which of the two it measured.
#[test]
fn replay_writes_what_the_library_writes_and_says_so() {
    for (replay, args) in [
        (false, vec!["--cycles", "20", "--warmup", "2"]),
        (true, vec!["--cycles", "20", "--warmup", "2", "--replay"]),
    ] {
        let (code, report, stderr) = throughput(&args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert_eq!(report["replayed"], replay, "{args:?}: {report}");
        assert_eq!(report["counts"]["cas"], 40, "two writes a cycle: {report}");
        assert_eq!(report["counts"]["load"], 0, "no read in a cycle: {report}");
        assert_eq!(report["round_trips_per_cycle"], 2.0, "{report}");
    }
}

/// Replaying needs a key of its own: it is refused beside `--processes`, whose clients share
/// one, with clap's usage error.
#[test]
fn replay_is_refused_beside_processes() {
    let (code, _, stderr) = throughput(&["--replay", "--processes", "2"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--processes"), "{stderr}");
}
