//! `baton-bench peers` on every store the environment offers (`scripts/test.sh` starts them and
//! exports their URLs): a run far too short for its figures to mean anything, but whose checks
//! do. Each store gets its rows (PostgreSQL's floor too); every peer connects and takes its lock;
//! and in B3, 16 clients on one key, baton's holds never overlap and no ticket passes one that
//! arrived before it (counted exactly, by arrival number and fence).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

/// Runs `baton-bench peers --json ARGS` without the variables `without`, and returns its report
/// and what it wrote to standard error. Exit 0 means every goal was met; 3, that the run went
/// through and some goal was not (a run this short is no measurement); anything else fails.
fn peers(args: &[&str], without: &[&str]) -> (Value, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_baton-bench"));
    command.args(["peers", "--json"]).args(args);
    for variable in without {
        command.env_remove(variable);
    }
    let output = command.output().expect("baton-bench runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        matches!(output.status.code(), Some(0 | 3)),
        "baton-bench peers failed ({}): {stderr}",
        output.status
    );
    let report = serde_json::from_slice(&output.stdout).expect("one JSON object");
    (report, stderr)
}

#[test]
fn peers_runs_on_every_store_and_baton_is_exclusive_and_fifo() {
    let args = [
        "--scenarios",
        "b1,b3,b4",
        "--rounds",
        "1",
        "--cycles",
        "3",
        "--load-rounds",
        "1",
        "--duration",
        "1s",
        "--handoffs",
        "2",
    ];
    let (report, stderr) = peers(&args, &[]);
    let rows = report["rows"].as_array().expect("rows");
    let mut stores = vec!["SQLite"];
    for (variable, store) in [
        ("BATON_TEST_POSTGRES_URL", "PostgreSQL"),
        ("BATON_TEST_REDIS_URL", "Redis"),
        ("BATON_TEST_ETCD_URL", "etcd"),
        ("BATON_TEST_S3_URL", "S3"),
        ("BATON_TEST_DYNAMODB_URL", "DynamoDB"),
    ] {
        if std::env::var_os(variable).is_some() {
            stores.push(store);
        }
    }
    for store in &stores {
        for scenario in ["B1", "B3", "B4"] {
            assert!(
                rows.iter()
                    .any(|r| r["store"] == *store && r["scenario"] == scenario),
                "no {scenario} row for {store}: {stderr}"
            );
        }
    }
    // PostgreSQL's floor (not a lock: an upsert with pg_notify, a waiter woken by LISTEN) takes
    // its turn beside the advisory lock in B1 and B4, its waiter woken by the release.
    if stores.contains(&"PostgreSQL") {
        for scenario in ["B1", "B4"] {
            assert!(
                rows.iter().any(|r| r["store"] == "PostgreSQL"
                    && r["scenario"] == scenario
                    && r["measure"].as_str().is_some_and(|m| m.contains("floor"))),
                "no {scenario} floor row for PostgreSQL: {stderr}"
            );
        }
    }
    // baton's writes replayed hand a key over on SQLite too: the waiter woken by the doorbell
    // of another store object in the same process.
    assert!(
        rows.iter().any(|r| r["store"] == "SQLite"
            && r["scenario"] == "B4"
            && r["measure"]
                .as_str()
                .is_some_and(|m| m.contains("writes replayed"))),
        "no B4 row of baton's writes replayed on SQLite: {stderr}"
    );
    let hot: Vec<&Value> = report["details"]
        .as_array()
        .expect("details")
        .iter()
        .filter(|d| d["scenario"] == "B3")
        .collect();
    assert!(hot.len() >= stores.len(), "a B3 per store: {hot:?}");
    for detail in hot {
        let baton = &detail["figures"][0];
        assert!(baton["grants"].as_u64().expect("grants") > 0, "{detail}");
        assert_eq!(baton["overlaps"], 0, "baton's holds overlapped: {detail}");
        assert_eq!(baton["fifo_exact"], true, "{detail}");
        assert_eq!(
            baton["fifo_violations"], 0,
            "a ticket passed one that arrived before it: {detail}"
        );
        // baton's requests are told apart: reads, writes that lost to another, and writes
        // under the store's lock.
        for split in ["loads_per_grant", "conflicts_per_grant", "locked_per_grant"] {
            assert!(baton[split].as_f64().is_some(), "no {split}: {detail}");
        }
        // And the peers' holds never overlap either, except where the peer has no exclusion
        // to speak of: none here has a lease shorter than the run.
        assert_eq!(detail["figures"][1]["overlaps"], 0, "{detail}");
    }
}

/// B2 measures PostgreSQL's floor beside baton (an upsert with `pg_notify` per write, nobody
/// listening, as nobody watches the keys of baton's clients there): a row for 1 client and one
/// for 8, each client on its key, every client cycling.
#[test]
fn b2_measures_the_postgres_floor_with_one_and_eight_clients() {
    assert!(
        std::env::var_os("BATON_TEST_POSTGRES_URL").is_some(),
        "BATON_TEST_POSTGRES_URL: run under scripts/test.sh or scripts/with-servers.sh"
    );
    let args = [
        "--scenarios",
        "b2",
        "--load-rounds",
        "1",
        "--duration",
        "300ms",
    ];
    let others = [
        "BATON_TEST_REDIS_URL",
        "BATON_TEST_ETCD_URL",
        "BATON_TEST_S3_URL",
        "BATON_TEST_DYNAMODB_URL",
    ];
    let (report, stderr) = peers(&args, &others);
    let rows = report["rows"].as_array().expect("rows");
    for clients in ["1 clients", "8 clients"] {
        let floor = rows.iter().find(|r| {
            r["store"] == "PostgreSQL"
                && r["scenario"] == "B2"
                && r["measure"]
                    .as_str()
                    .is_some_and(|m| m.contains(clients) && m.contains("floor"))
        });
        let floor = floor.unwrap_or_else(|| panic!("no B2 floor row, {clients}: {stderr}"));
        let cycles = floor["baton"]["median"].as_f64().expect("a median rate");
        assert!(cycles > 0.0, "the floor's clients cycled: {floor}");
    }
}

/// B1, B2 and B4 measure, on PostgreSQL and on Redis, the floor of baton's own writes beside
/// the store's peer: real turns recorded, then their writes replayed by CAS, two requests a
/// cycle, in a row of their own; in B4 the waiter writes its recorded enqueue and is woken by
/// the store's watch when the holder writes the recorded release that grants it: one request
/// a release.
#[test]
fn b1_b2_and_b4_measure_batons_writes_replayed_on_postgres_and_redis() {
    for var in ["BATON_TEST_POSTGRES_URL", "BATON_TEST_REDIS_URL"] {
        assert!(
            std::env::var_os(var).is_some(),
            "{var}: run under scripts/test.sh or scripts/with-servers.sh"
        );
    }
    let args = [
        "--scenarios",
        "b1,b2,b4",
        "--rounds",
        "1",
        "--cycles",
        "20",
        "--load-rounds",
        "1",
        "--duration",
        "300ms",
        "--handoffs",
        "2",
        "--settle",
        "20ms",
    ];
    let others = [
        "BATON_TEST_ETCD_URL",
        "BATON_TEST_S3_URL",
        "BATON_TEST_DYNAMODB_URL",
    ];
    let (report, stderr) = peers(&args, &others);
    let rows = report["rows"].as_array().expect("rows");
    let replayed = |store: &str, scenario: &str| {
        rows.iter()
            .filter(|r| {
                r["store"] == store
                    && r["scenario"] == scenario
                    && r["measure"]
                        .as_str()
                        .is_some_and(|m| m.contains("writes replayed"))
            })
            .collect::<Vec<_>>()
    };
    // The one row of `scenario` on `store`, whose notes say `noted` (`why`).
    let one_noting = |store: &str, scenario: &str, noted: &str, why: &str| {
        let rows = replayed(store, scenario);
        let [row] = rows.as_slice() else {
            panic!("one {scenario} row of baton's writes replayed on {store}: {rows:?}\n{stderr}");
        };
        let notes = row["notes"].as_str().unwrap_or_default();
        assert!(notes.contains(noted), "{why}: {row}");
        (*row).clone()
    };
    for store in ["PostgreSQL", "Redis"] {
        let b1 = "requests/cycle: floor 2.00";
        one_noting(store, "B1", b1, "two writes a cycle, each a request");
        assert_eq!(
            replayed(store, "B2").len(),
            2,
            "B2 with 1 and 8 clients on {store}"
        );
        let b4 = one_noting(
            store,
            "B4",
            ", 1.00 vs",
            "the release is one write, one request",
        );
        let wake_up = if store == "Redis" {
            "BLPOP"
        } else {
            "pg_advisory_lock"
        };
        assert!(
            b4["peer"].as_str().is_some_and(|p| p.contains(wake_up)),
            "next to the store's own wake-up: {b4}"
        );
        assert!(
            b4["baton"]["median"].as_f64().is_some_and(|ms| ms > 0.0),
            "the waiter was woken: {b4}"
        );
    }
}

/// The floor opens a fresh file as baton's store does, even while another process holds its
/// write lock: switching a fresh file to WAL needs that lock, and SQLite answers "database is
/// locked" at once, whatever the busy timeout (B8's 16 loops of the floor, starting together
/// on a fresh file, met it under load).
#[test]
fn the_floor_waits_out_a_write_lock_on_a_fresh_file() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("floor.db");
    let holder = rusqlite::Connection::open(&db).expect("the file opens");
    holder
        .execute_batch("CREATE TABLE t (a); BEGIN IMMEDIATE; INSERT INTO t VALUES (1);")
        .expect("a write transaction, left open");
    let floor = Command::new(env!("CARGO_BIN_EXE_baton-floor-run"))
        .args([db.to_str().expect("a UTF-8 path"), "k", "--", "true"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("baton-floor-run starts");
    std::thread::sleep(std::time::Duration::from_millis(300));
    holder.execute_batch("COMMIT").expect("the commit");
    let output = floor.wait_with_output().expect("baton-floor-run ends");
    assert!(
        output.status.success(),
        "the floor waited for the lock: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// B7 measures the floor beside baton and `flock`: two rows more (the floor against `flock`,
/// baton against the floor), and the floor is a working program: it takes and gives back its
/// row around CMD and exits as CMD did.
#[test]
fn b7_measures_the_floor_beside_baton() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("floor.db");
    let floor = env!("CARGO_BIN_EXE_baton-floor-run");
    let exited = Command::new(floor)
        .args([
            db.to_str().expect("a UTF-8 path"),
            "k",
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .status()
        .expect("baton-floor-run runs");
    assert_eq!(exited.code(), Some(3), "the floor exits as CMD did");
    let args = ["--scenarios", "b7", "--processes", "2"];
    let (report, stderr) = peers(&args, &["BATON_TEST_ETCD_URL"]);
    let rows = report["rows"].as_array().expect("rows");
    let b7 = |peer: &str| {
        rows.iter()
            .any(|r| r["scenario"] == "B7" && r["peer"].as_str().is_some_and(|p| p.contains(peer)))
    };
    assert!(b7("flock"), "no B7 row against flock: {stderr}");
    assert!(
        b7("floor"),
        "no B7 row of baton against the floor: {stderr}"
    );
    assert!(
        rows.iter()
            .any(|r| r["scenario"] == "B7"
                && r["measure"].as_str().is_some_and(|m| m.contains("floor"))),
        "no B7 row of the floor against flock: {stderr}"
    );
}

/// B8 loops B7's floor too: beside baton's two rows with their goals, the floor's 16 loops
/// against `flock`'s, and baton's against the floor's, each a rate from real loops. Given etcd,
/// it loops `baton run` on it beside one loop of it and 16 loops of `etcdctl lock`.
#[test]
fn b8_loops_the_floor_beside_baton_and_flock_and_on_etcd() {
    let args = [
        "--scenarios",
        "b8",
        "--loop-rounds",
        "1",
        "--loop-duration",
        "1s",
    ];
    let (report, stderr) = peers(&args, &[]);
    let rows: Vec<&Value> = report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["scenario"] == "B8")
        .collect();
    let row = |store: &str, peer: &str, floor_measured: bool| {
        rows.iter()
            .find(|r| {
                r["store"] == store
                    && r["peer"].as_str().is_some_and(|p| p.starts_with(peer))
                    && r["measure"].as_str().is_some_and(|m| m.contains("floor")) == floor_measured
            })
            .unwrap_or_else(|| {
                panic!("no B8 row on {store} against {peer} (floor: {floor_measured}): {stderr}")
            })
    };
    let mut expected = vec![
        ("SQLite", "baton run, 1 loop", false, true),
        ("SQLite", "flock(1), 16 loops", false, true),
        ("SQLite", "flock(1), 16 loops", true, false),
        ("SQLite", "floor: baton-floor-run", false, false),
    ];
    if std::env::var_os("BATON_TEST_ETCD_URL").is_some() {
        expected.push(("etcd", "baton run, 1 loop", false, true));
        expected.push(("etcd", "etcdctl lock, 16 loops", false, false));
    }
    for &(store, peer, floor_measured, goal) in &expected {
        let found = row(store, peer, floor_measured);
        for side in ["baton", "peer_fig"] {
            let rate = found[side]["median"].as_f64().expect("a median rate");
            assert!(rate > 0.0, "{side} of {found}: no turns");
        }
        assert_eq!(found["goal"].is_object(), goal, "goal of {found}");
    }
    assert_eq!(rows.len(), expected.len(), "{rows:?}");
}
