//! `baton-bench hot-floor`, in runs far too short for their figures to mean anything: it runs
//! both kinds of round on SQLite, PostgreSQL, Redis and etcd, its lock held (no overlap, no
//! grant out of order), and on SQLite it makes its own file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

fn hot_floor(args: &[&str]) -> (Option<i32>, Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_baton-bench"))
        .args(["hot-floor", "--json"])
        .args(args)
        .output()
        .expect("baton-bench runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let report = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output.status.code(), report, stderr)
}

/// Two rounds of each kind, alternating; a round whose grants overlapped or passed an earlier
/// arrival would have ended the run with an error.
fn assert_rounds_alternate_and_grant(extra: &[&str], store: &str) {
    let mut args = vec!["--clients", "4", "--rounds", "2", "--duration", "300ms"];
    args.extend(extra);
    let (code, report, stderr) = hot_floor(&args);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(report["store"], store, "{report}");
    for side in ["alone", "contended"] {
        let rates = report[side].as_array().expect("a list of rates");
        assert_eq!(rates.len(), 2, "{report}");
        assert!(
            rates.iter().all(|rate| rate.as_f64().unwrap() > 0.0),
            "{report}"
        );
    }
    assert_eq!(report["clients"], 4);
    assert!(report["ratio"].as_f64().unwrap() > 0.0, "{report}");
}

#[test]
fn rounds_of_one_client_and_of_many_alternate_and_grant_on_sqlite() {
    assert_rounds_alternate_and_grant(&[], "sqlite");
}

/// `BATON_TEST_POSTGRES_URL` is exported by `scripts/test.sh` and `scripts/with-servers.sh`.
#[test]
fn rounds_of_one_client_and_of_many_alternate_and_grant_on_postgres() {
    let url = std::env::var("BATON_TEST_POSTGRES_URL")
        .expect("BATON_TEST_POSTGRES_URL: run under scripts/test.sh or scripts/with-servers.sh");
    assert_rounds_alternate_and_grant(&["--postgres", &url], "postgres");
}

/// The floor is a SQLite file of its own: it takes no store.
#[test]
fn a_store_is_refused() {
    let (code, _, stderr) = hot_floor(&["--store", "sqlite:/nonexistent/x.db"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--store"), "{stderr}");
}

/// `BATON_TEST_REDIS_URL` is exported by `scripts/test.sh` and `scripts/with-servers.sh`.
#[test]
fn rounds_of_one_client_and_of_many_alternate_and_grant_on_redis() {
    let url = std::env::var("BATON_TEST_REDIS_URL")
        .expect("BATON_TEST_REDIS_URL: run under scripts/test.sh or scripts/with-servers.sh");
    assert_rounds_alternate_and_grant(&["--redis", &url], "redis");
}

/// `BATON_TEST_ETCD_URL` is exported by `scripts/test.sh` and `scripts/with-servers.sh`.
#[test]
fn rounds_of_one_client_and_of_many_alternate_and_grant_on_etcd() {
    let url = std::env::var("BATON_TEST_ETCD_URL")
        .expect("BATON_TEST_ETCD_URL: run under scripts/test.sh or scripts/with-servers.sh");
    assert_rounds_alternate_and_grant(&["--etcd", &url], "etcd");
}
