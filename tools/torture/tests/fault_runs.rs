//! The short torture run of the test command: `baton-torture matrix` on a fresh SQLite file
//! and on PostgreSQL, Redis, etcd, S3 and DynamoDB servers of its own (`scripts/with-servers.sh`
//! starts them for this run alone, so that its restarts and its load reach no other test),
//! each under the faults it can be given — kill -9 of holders and waiters, a holder paused past
//! its TTL, SQLite stopped mid-transaction, server restarts, the fault proxy's cut connections,
//! black holes, latency, lost answers to writes and clients stopped between their write landing
//! and their reading its answer, clients' clocks ±30 s — for `BATON_TORTURE_DURATION` (default
//! 45 s) per run. No violation, no lost ticket; and the faults must really have been injected,
//! or a quiet run would pass for a tortured one. The table it prints is the one TORTURE.md
//! records.
//!
//! Needs the `baton` binary next to this one (`cargo build --workspace`, as scripts/test.sh
//! does first).
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use serde_json::Value;

mod common;

#[test]
fn every_store_survives_its_faults() {
    let duration = std::env::var("BATON_TORTURE_DURATION").unwrap_or_else(|_| "45s".into());
    let common::Matrix { stderr, summaries } =
        common::matrix(&["--work", "locks", "--duration", &duration, "--seed", "11"]);
    for summary in &summaries {
        // On failure, the end of the run's log too: which faults, which errors.
        let with_log = || {
            let stderr: Vec<&str> = stderr.lines().collect();
            format!(
                "{summary}\n--- end of its log:\n{}\n--- end of the matrix's stderr:\n{}",
                log_tail(summary),
                stderr[stderr.len().saturating_sub(40)..].join("\n")
            )
        };
        assert_eq!(summary["violations"], 0, "{}", with_log());
        assert_eq!(summary["lost"], 0, "{}", with_log());
        assert!(summary["holds"].as_u64().unwrap() > 0, "{}", with_log());
        if summary["by_arrival"] == true {
            // Turns really arrived beside the document, under the faults.
            assert!(summary["arrivals"].as_u64().unwrap() > 0, "{}", with_log());
        }
        if summary["kind"] == "mixed" {
            // The mixed runs' fourth key is a pool: its slots were held too.
            assert!(
                summary["pool_holds"].as_u64().unwrap() > 0,
                "{}",
                with_log()
            );
        }
        if summary["clients"].as_u64().unwrap_or(0) >= 50 {
            // The long-queue runs: turns waited in a written segment of the backlog (its tail
            // holds at most 32).
            let most = summary["queues"]["backlog_max"].as_u64().unwrap_or(0);
            assert!(most > 32, "no turn waited in a segment: {}", with_log());
        }
        // Every kind of fault asked for was injected at least once.
        for fault in summary["faults"].as_array().unwrap() {
            let fault = fault.as_str().unwrap();
            if fault == "pause-in-transaction" {
                // Caught only when a process is stopped inside its microseconds-long
                // transaction: attempted every time, caught most runs, not all.
                continue;
            }
            assert!(
                summary["injected"][fault].as_u64().unwrap_or(0) > 0,
                "{fault} never injected: {}",
                with_log()
            );
        }
    }
}

/// The last lines of a run's log: its faults, and the errors of the turns that failed.
fn log_tail(summary: &Value) -> String {
    let Some(path) = summary["log"].as_str() else {
        return "(no log)".into();
    };
    let Ok(text) = std::fs::read_to_string(path) else {
        return format!("(cannot read {path})");
    };
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}
