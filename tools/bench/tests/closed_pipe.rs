//! `baton-bench … | head`: a reader that has gone before the report is written ends the output,
//! as for any Unix filter, with no panic and the exit status the run would have had. Every
//! subcommand writes its table or JSON through one function; one cheap subcommand, in both
//! forms, covers it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

/// Runs `baton-bench ARGS` with its standard output a pipe whose reader is closed at once, and
/// returns its exit code and standard error.
fn into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton-bench"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("baton-bench starts");
    // The report is written at the end of the run, long after this.
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("baton-bench ends");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
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
