//! `baton-bench jobs-throughput` and `jobs-floor`, in runs far too short for their figures to
//! mean anything, but whose checks do: every job done, each key's runs one at a time with
//! rising fences, and on PostgreSQL the database vacuumed between the untimed preparation and
//! the timed part unless `--no-vacuum` (a peer's run is vacuumed the same way, so a side-by-side
//! run compares runs that start alike).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

/// `BATON_TEST_POSTGRES_URL`, which `scripts/test.sh` and `scripts/with-servers.sh` export.
fn postgres_url() -> String {
    std::env::var("BATON_TEST_POSTGRES_URL")
        .expect("BATON_TEST_POSTGRES_URL: run under scripts/test.sh or scripts/with-servers.sh")
}

/// Runs `baton-bench ARGS --json` and returns its report.
fn bench(args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_baton-bench"))
        .args(args)
        .arg("--json")
        .output()
        .expect("baton-bench runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{args:?}: {stderr}");
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

const SMALL: [&str; 6] = ["--keys", "20", "--jobs", "60", "--workers", "3"];

fn throughput(store: &str, extra: &[&str]) -> Value {
    let mut args = vec!["jobs-throughput", "--store", store];
    args.extend(SMALL);
    args.extend(extra);
    bench(&args)
}

fn assert_every_job_ran_once_per_key_at_a_time(report: &Value) {
    assert_eq!(report["jobs"], 60, "{report}");
    assert_eq!(report["per_worker"].as_array().unwrap().len(), 3);
    let done: u64 = report["per_worker"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(done, 60, "{report}");
    assert_eq!(report["n_overlaps"], 0, "{report}");
    assert_eq!(report["n_fences_not_rising"], 0, "{report}");
    assert_eq!(report["n_failures"], 0, "{report}");
}

#[test]
fn jobs_throughput_on_postgres_is_vacuumed_unless_told_not_to() {
    let url = postgres_url();
    let vacuumed = throughput(&url, &[]);
    assert_every_job_ran_once_per_key_at_a_time(&vacuumed);
    assert_eq!(vacuumed["vacuumed"], true);
    let not = throughput(&url, &["--no-vacuum"]);
    assert_every_job_ran_once_per_key_at_a_time(&not);
    assert_eq!(not["vacuumed"], false);
}

/// Jobs due first under a prefix no worker of the run serves do not stop the run, and are
/// drained after it, so that they leave a shared store's due index.
#[test]
fn jobs_due_elsewhere_are_passed_by_the_run_and_drained_after_it() {
    let url = postgres_url();
    let report = throughput(&url, &["--due-elsewhere", "40"]);
    assert_every_job_ran_once_per_key_at_a_time(&report);
    assert_eq!(report["due_elsewhere"], 40, "{report}");
    assert_eq!(report["drained_elsewhere"], 40, "{report}");
    let plain = throughput(&url, &[]);
    assert_eq!(plain["due_elsewhere"], 0, "{plain}");
    assert_eq!(plain["drained_elsewhere"], 0, "{plain}");
}

#[test]
fn jobs_throughput_elsewhere_has_nothing_to_vacuum() {
    let dir = std::env::temp_dir().join(format!("baton-bench-jobs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("sqlite:{}", dir.join("jobs.db").display());
    let report = throughput(&store, &[]);
    assert_every_job_ran_once_per_key_at_a_time(&report);
    assert_eq!(report["vacuumed"], false);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn jobs_floor_is_vacuumed_unless_told_not_to() {
    let url = postgres_url();
    for (extra, vacuumed) in [(None, true), (Some("--no-vacuum"), false)] {
        let mut args = vec!["jobs-floor", "--store", url.as_str()];
        args.extend(SMALL);
        args.extend(extra);
        let report = bench(&args);
        assert_eq!(report["jobs"], 60, "{report}");
        assert_eq!(report["vacuumed"], vacuumed, "{report}");
        assert!(report["jobs_per_s"].as_f64().unwrap() > 0.0, "{report}");
    }
}
