//! `baton run --max-hold`: a command that holds too long is stopped (SIGTERM to its process
//! group, SIGKILL after a grace period if it ignores that), the turn is recorded as failed, and
//! baton exits 79.

use baton_testkit as common;

use std::time::Duration;

use common::{for_each_store, pid_alive, wait_until};

#[test]
fn a_command_past_max_hold_is_stopped_and_recorded_failed() {
    for_each_store(|ctx| {
        let key = ctx.key("max-hold");
        // The command records its pid, says when SIGTERM arrives, and would otherwise run 30 s.
        let done = ctx
            .baton([
                "run",
                "--max-hold",
                "1s",
                &key,
                "--",
                "sh",
                "-c",
                "echo $$ > \"$TEST_DIR/pid\"; trap 'echo TERM > \"$TEST_DIR/term\"; exit 3' TERM; \
                 sleep 30 & wait",
            ])
            .run();
        done.assert_code(79);
        assert!(
            done.elapsed < Duration::from_secs(10),
            "stopped at about 1 s, not after 30: {}",
            done.describe()
        );
        assert!(ctx.exists("term"), "the command got SIGTERM first");
        let pid: i32 = ctx.read("pid").trim().parse().expect("a pid");
        wait_until("the command is gone", Duration::from_secs(5), || {
            !pid_alive(pid)
        });
        let view = ctx.key_view(&key);
        assert_eq!(view.raw["last_outcome"], "failed", "{}", view.raw);
        assert!(view.holders().is_empty(), "{}", view.raw);
        assert!(done.stderr.contains("--max-hold"), "{}", done.describe());
        // The history says why.
        let log = ctx.baton(["log", &key, "--json", "-n", "1"]).run();
        log.assert_code(0);
        let entry: serde_json::Value =
            serde_json::from_str(log.stdout.trim()).expect("one JSON line");
        assert_eq!(entry["outcome"], "failed", "{entry}");
        let reason = entry["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("--max-hold 1s"), "{entry}");
    });
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace_period() {
    for_each_store(|ctx| {
        let key = ctx.key("max-hold-kill");
        let done = ctx
            .baton([
                "run",
                "-q",
                "--max-hold",
                "1s",
                &key,
                "--",
                "sh",
                "-c",
                "trap '' TERM; echo $$ > \"$TEST_DIR/pid\"; i=0; while [ $i -lt 300 ]; do \
                 sleep 0.1; i=$((i+1)); done",
            ])
            .run();
        done.assert_code(79);
        // 1 s, then 5 s of grace, then SIGKILL.
        assert!(
            done.elapsed >= Duration::from_secs(5) && done.elapsed < Duration::from_secs(20),
            "{}",
            done.describe()
        );
        let pid: i32 = ctx.read("pid").trim().parse().expect("a pid");
        wait_until("the command is gone", Duration::from_secs(5), || {
            !pid_alive(pid)
        });
        assert_eq!(ctx.key_view(&key).raw["last_outcome"], "failed");
    });
}
