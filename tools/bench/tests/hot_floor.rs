//! `baton-bench hot-floor`, in runs far too short for their figures to mean anything: it runs
//! both kinds of round on SQLite, PostgreSQL, Redis and etcd (with a key per entry, with the
//! queue one document, and with arrivals beside it), its lock held (no overlap, no grant out
//! of order), and on SQLite it makes its own file.
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

/// The queue one document written by compare-and-swap: one client alone writes twice a turn and
/// never loses; several write at least that.
#[test]
fn rounds_with_the_queue_one_document_count_their_writes_on_etcd() {
    let url = std::env::var("BATON_TEST_ETCD_URL")
        .expect("BATON_TEST_ETCD_URL: run under scripts/test.sh or scripts/with-servers.sh");
    let args = ["--etcd", &url, "--one-document"];
    assert_rounds_alternate_and_grant(&args, "etcd-document");
    let (report, alone, contended) = counted(&args);
    assert_eq!(alone, [2.0, 2.0], "{report}");
    for (requests, lost) in contended {
        assert!(
            requests >= 2.0 && (requests - lost - 2.0).abs() < 0.01,
            "{report}"
        );
    }
}

/// The queue one document with arrivals beside it: one client alone writes twice a turn and
/// never loses (it claims and releases); several write at least twice a turn (an arrival or a
/// claim, and a release), and more only where a waiter on a free key takes arrivals in; their
/// arrivals' waits are counted.
#[test]
fn rounds_with_arrivals_beside_the_document_count_their_writes_on_etcd() {
    let url = std::env::var("BATON_TEST_ETCD_URL")
        .expect("BATON_TEST_ETCD_URL: run under scripts/test.sh or scripts/with-servers.sh");
    let args = ["--etcd", &url, "--arrivals"];
    assert_rounds_alternate_and_grant(&args, "etcd-arrivals");
    let (report, alone, contended) = counted(&args);
    assert_eq!(alone, [2.0, 2.0], "{report}");
    for (requests, lost) in contended {
        assert!(requests - lost >= 2.0, "{report}");
    }
    // Every arrival is taken in by a write after the one its client had seen.
    let waits = report["contended_arrival_wait_mean"]
        .as_array()
        .expect("waits");
    assert_eq!(waits.len(), 2, "{report}");
    assert!(
        waits.iter().all(|wait| wait.as_f64().unwrap() >= 1.0),
        "{report}"
    );
}

/// The same with the arrivals read before each release instead of watched: one client alone
/// sends three requests a turn (its claim, a read, its release), several at least three.
#[test]
fn rounds_with_arrivals_read_before_the_release_count_their_requests_on_etcd() {
    let url = std::env::var("BATON_TEST_ETCD_URL")
        .expect("BATON_TEST_ETCD_URL: run under scripts/test.sh or scripts/with-servers.sh");
    let args = ["--etcd", &url, "--arrivals", "--read-arrivals"];
    assert_rounds_alternate_and_grant(&args, "etcd-arrivals-read");
    let (report, alone, contended) = counted(&args);
    assert_eq!(alone, [3.0, 3.0], "{report}");
    for (requests, lost) in contended {
        assert!(requests - lost >= 3.0, "{report}");
    }
}

/// With every write of the document padded, as baton's tickets make its document kilobytes,
/// the floor still locks (no overlap, no grant out of order), says how much it padded, and its
/// clients were sent documents that large (without the padding, a few places).
#[test]
fn rounds_with_a_padded_document_grant_and_say_so_on_etcd() {
    let url = std::env::var("BATON_TEST_ETCD_URL")
        .expect("BATON_TEST_ETCD_URL: run under scripts/test.sh or scripts/with-servers.sh");
    for (pad, least, most) in [("5000", 5000.0, 6000.0), ("0", 1.0, 200.0)] {
        let args = ["--etcd", &url, "--arrivals", "--pad-document", pad];
        let (report, _, _) = counted(&args);
        assert_eq!(report["store"], "etcd-arrivals", "{report}");
        let padded = report["document_pad_bytes"].as_u64().unwrap_or(0);
        assert_eq!(padded, pad.parse::<u64>().unwrap(), "{report}");
        let sizes = report["contended_document_bytes_most"]
            .as_array()
            .expect("sizes");
        assert_eq!(sizes.len(), 2, "{report}");
        for size in sizes.iter().map(|size| size.as_f64().unwrap()) {
            assert!((least..=most).contains(&size), "pad {pad}: {report}");
        }
    }
}

/// Two rounds of each kind with four clients, on a floor that counts its requests: the report,
/// the requests of each turn alone, and the requests and lost writes of each turn with four.
fn counted(args: &[&str]) -> (Value, Vec<f64>, Vec<(f64, f64)>) {
    let mut all = vec!["--clients", "4", "--rounds", "2", "--duration", "300ms"];
    all.extend(args);
    let (code, report, stderr) = hot_floor(&all);
    assert_eq!(code, Some(0), "{stderr}");
    let counts = |name: &str| -> Vec<f64> {
        let values = report[name].as_array().expect("a list of counts");
        values.iter().map(|value| value.as_f64().unwrap()).collect()
    };
    let alone = counts("alone_requests_per_grant");
    let (requests, lost) = (
        counts("contended_requests_per_grant"),
        counts("contended_lost_per_grant"),
    );
    assert_eq!((requests.len(), lost.len()), (2, 2), "{report}");
    let contended = requests.into_iter().zip(lost).collect();
    (report, alone, contended)
}

/// `--one-document` and `--arrivals` are shapes of the etcd floor only, and one at a time;
/// `--read-arrivals` is a kind of `--arrivals`.
#[test]
fn the_etcd_shapes_need_etcd() {
    for shape in ["--one-document", "--arrivals"] {
        let (code, _, stderr) = hot_floor(&[shape]);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains("--etcd"), "{stderr}");
    }
    let both = [
        "--etcd",
        "etcd://127.0.0.1:1/x",
        "--one-document",
        "--arrivals",
    ];
    let (code, _, stderr) = hot_floor(&both);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    let reads_alone = ["--etcd", "etcd://127.0.0.1:1/x", "--read-arrivals"];
    let (code, _, stderr) = hot_floor(&reads_alone);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--arrivals"), "{stderr}");
}
