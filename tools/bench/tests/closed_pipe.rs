//! `baton-bench … | head`: a reader that has gone before the report is written ends the output,
//! as for any Unix filter, with no panic and the exit status the run would have had. Every
//! subcommand writes its table or JSON through one function; one cheap subcommand, in both
//! forms, covers it. Standard error too (`2>&1 | head`): progress lines into a closed pipe are
//! dropped, not a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};

/// Starts `baton-bench ARGS` on SQLite alone (no test server's URL), with standard output a
/// pipe whose reader is closed at once, and standard error too when `close_stderr`.
fn spawn_into_closed_pipes(args: &[&str], close_stderr: bool) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_baton-bench"));
    command.args(args);
    for store in ["POSTGRES", "REDIS", "ETCD", "S3", "DYNAMODB"] {
        command.env_remove(format!("BATON_TEST_{store}_URL"));
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("baton-bench starts");
    // What the run writes comes long after this.
    drop(child.stdout.take());
    if close_stderr {
        drop(child.stderr.take());
    }
    child
}

/// Runs `baton-bench ARGS` into a closed standard output, and returns its exit code and
/// standard error.
fn into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let child = spawn_into_closed_pipes(args, false);
    let output = child.wait_with_output().expect("baton-bench ends");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

#[test]
fn progress_into_a_closed_pipe_is_dropped_and_the_run_goes_on() {
    // `peers` writes a line to standard error at each scenario; SQLite alone keeps it short.
    let args = [
        "peers",
        "--scenarios",
        "b1",
        "--rounds",
        "1",
        "--cycles",
        "3",
    ];
    let status = spawn_into_closed_pipes(&args, true)
        .wait()
        .expect("baton-bench ends");
    // 0: every goal met; 3: some not (a run this short measures nothing); 101 would be a panic.
    assert!(matches!(status.code(), Some(0 | 3)), "{status}");
}

#[test]
fn a_report_into_a_closed_pipe_ends_quietly_with_the_runs_status() {
    let run = ["throughput", "--cycles", "20", "--warmup", "2"];
    for json in [false, true] {
        let mut args = run.to_vec();
        if json {
            args.push("--json");
        }
        let (code, stderr) = into_closed_pipe(&args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
}

/// Runs `baton-floor-run ARGS` with its standard error a pipe nobody reads, and returns its
/// exit code.
fn floor_run_into_a_closed_pipe(args: &[&str]) -> Option<i32> {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_baton-floor-run"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .expect("baton-floor-run starts")
        .code()
}

#[test]
fn the_floor_run_says_its_usage_and_errors_into_a_closed_pipe_without_a_panic() {
    assert_eq!(
        floor_run_into_a_closed_pipe(&[]),
        Some(2),
        "usage, not a panic"
    );
    let missing = "/nonexistent-directory-of-baton-tests/floor.db";
    assert_eq!(
        floor_run_into_a_closed_pipe(&[missing, "k", "--", "true"]),
        Some(1),
        "an error, not a panic"
    );
}
