//! `baton once` with real processes on every store: duplicates run CMD exactly once, a failing
//! CMD is tried by the next caller and then dead until `baton retry`, a run whose baton is killed
//! is recorded as expired and run again after its lease, sequences run in order (replays
//! skipped, gaps refused with 80), and `--retain` bounds how long a success is remembered.
//!
//! Every CMD appends one line to `$TEST_DIR/log` when it starts (one `write` with `O_APPEND`:
//! lines never interleave), so the log counts the runs.

use baton_testkit as common;

use std::time::{Duration, Instant};

use common::{for_each_store, pid_alive, send_signal, wait_until, Ctx, PROMPT};
use serde_json::Value;

/// A CMD that logs `ran NAME FENCE ATTEMPT`, sleeps `secs`, and exits `code`.
fn logged(name: &str, secs: &str, code: i32) -> String {
    format!(
        "echo \"ran {name} $BATON_FENCE $BATON_ATTEMPT\" >> \"$TEST_DIR/log\"; sleep {secs}; \
         exit {code}"
    )
}

/// [`logged`], but the command waits for the file `gate` in the test's directory before it
/// sleeps: a holder that stays until the test has seen what it waits for, however slow the
/// machine.
fn gated(name: &str, gate: &str, code: i32) -> String {
    format!(
        "echo \"ran {name} $BATON_FENCE $BATON_ATTEMPT\" >> \"$TEST_DIR/log\"; \
         while [ ! -e \"$TEST_DIR/{gate}\" ]; do sleep 0.05; done; exit {code}"
    )
}

fn once<'c>(ctx: &'c Ctx, name: &str, key: &str, flags: &[&str], script: &str) -> common::Cmd<'c> {
    let mut args = vec!["once", key, "--poll", "100ms", "--context", name];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    ctx.baton(args).name(name)
}

fn runs(ctx: &Ctx) -> Vec<String> {
    if ctx.exists("log") {
        ctx.lines("log")
    } else {
        Vec::new()
    }
}

/// The key's run-once record, as `baton status --json` shows it.
fn record(ctx: &Ctx, key: &str) -> Value {
    let status = ctx.status();
    let keys = status["keys"].as_array().cloned().unwrap_or_default();
    let found = keys.into_iter().find(|k| k["key"] == key);
    found.map(|k| k["once"].clone()).unwrap_or(Value::Null)
}

#[test]
fn ten_concurrent_duplicates_run_cmd_exactly_once() {
    for_each_store(|ctx| {
        let key = ctx.key("charge/order-1");
        let procs: Vec<common::Proc> = (0..10)
            .map(|i| {
                let name = format!("c{i}");
                once(ctx, &name, &key, &[], &logged(&name, "1", 0)).spawn()
            })
            .collect();
        let mut skipped = 0;
        for mut proc in procs {
            let done = proc.wait(PROMPT);
            done.assert_code(0);
            if done.stderr.contains("skipped, not run") {
                skipped += 1;
            }
        }
        let ran = runs(ctx);
        assert_eq!(ran.len(), 1, "CMD ran more than once: {ran:?}");
        assert_eq!(skipped, 9, "the other nine say they skipped");
        let r = record(ctx, &key);
        assert_eq!(r["state"], "done", "{r}");
        assert_eq!(r["runs"], 1, "{r}");
        // The run's fence is the one its history entry holds, and it succeeded.
        let fence: u64 = ran[0]
            .split(' ')
            .nth(2)
            .and_then(|f| f.parse().ok())
            .expect("fence");
        let entries = ctx.history(&key);
        let succeeded: Vec<&Value> = entries
            .iter()
            .filter(|e| e["outcome"] == "succeeded")
            .collect();
        assert_eq!(succeeded.len(), 1, "{entries:?}");
        assert_eq!(succeeded[0]["fence"], fence);
        // A later caller skips at once.
        let late = once(ctx, "late", &key, &[], &logged("late", "0", 0)).run();
        late.assert_code(0);
        assert!(late.stderr.contains("already succeeded"), "{}", late.stderr);
        assert_eq!(runs(ctx).len(), 1);
    });
}

#[test]
fn a_failing_cmd_is_tried_by_the_next_caller_then_dead_until_retry() {
    for_each_store(|ctx| {
        let key = ctx.key("email/u42");
        let flags = ["--max-attempts", "2"];
        let mut a = once(ctx, "A", &key, &flags, &gated("A", "a-fails", 3)).spawn();
        ctx.wait_holding(&key, "A");
        let mut b = once(ctx, "B", &key, &flags, &logged("B", "0", 4)).spawn();
        ctx.wait_queued(&key, "B");
        ctx.touch("a-fails");
        let a = a.wait(PROMPT);
        a.assert_code(3);
        assert!(a.stderr.contains("attempt 1 of 2 failed"), "{}", a.stderr);
        assert!(
            a.stderr.contains("the next caller tries again"),
            "{}",
            a.stderr
        );
        // The waiting duplicate tried in turn: the second attempt, the last.
        let b = b.wait(PROMPT);
        b.assert_code(4);
        assert!(b.stderr.contains("now dead"), "{}", b.stderr);
        let ran = runs(ctx);
        assert!(
            ran[0].starts_with("ran A ") && ran[0].ends_with(" 1"),
            "{ran:?}"
        );
        assert!(
            ran[1].starts_with("ran B ") && ran[1].ends_with(" 2"),
            "{ran:?}"
        );
        // Dead: callers exit 1 without running, until `baton retry KEY`.
        let c = once(ctx, "C", &key, &flags, &logged("C", "0", 0)).run();
        c.assert_code(1);
        assert!(
            c.stderr.contains("is dead") && c.stderr.contains("baton retry"),
            "{}",
            c.stderr
        );
        assert_eq!(record(ctx, &key)["state"], "dead");
        ctx.baton(["retry", key.as_str()]).run().assert_code(0);
        let again = ctx.baton(["retry", key.as_str()]).run();
        again.assert_code(1);
        assert!(again.stderr.contains("not dead"), "{}", again.stderr);
        once(ctx, "D", &key, &flags, &logged("D", "0", 0))
            .run()
            .assert_code(0);
        once(ctx, "E", &key, &flags, &logged("E", "0", 0))
            .run()
            .assert_code(0);
        let ran = runs(ctx);
        assert_eq!(ran.len(), 3, "A, B and D ran; C and E did not: {ran:?}");
        assert!(
            ran[2].starts_with("ran D ") && ran[2].ends_with(" 1"),
            "{ran:?}"
        );
    });
}

#[test]
fn a_killed_run_is_recorded_expired_and_the_next_caller_runs_it_after_the_lease() {
    for_each_store(|ctx| {
        let key = ctx.key("migrate");
        let flags = ["--ttl", "2s"];
        let slow =
            "echo \"ran A $BATON_FENCE\" >> \"$TEST_DIR/log\"; echo $$ > \"$TEST_DIR/A.pid\"; \
                    sleep 60";
        let a = once(ctx, "A", &key, &flags, slow).spawn();
        let a_cmd = ctx.wait_pid("A.pid", PROMPT);
        ctx.kill_group_on_drop(a_cmd);
        let mut b = once(ctx, "B", &key, &flags, &logged("B", "0", 0)).spawn();
        ctx.wait_queued(&key, "B");
        send_signal(a.pid(), libc::SIGKILL);
        wait_until("A's command to die with it", PROMPT, || !pid_alive(a_cmd));
        let b_done = b.wait(PROMPT);
        b_done.assert_code(0);
        assert!(
            b_done.stderr.contains("attempt 2 of 3"),
            "{}",
            b_done.stderr
        );
        let ran = runs(ctx);
        assert_eq!(ran.len(), 2, "{ran:?}");
        let fence_of = |line: &str| -> u64 {
            line.split(' ')
                .nth(2)
                .and_then(|f| f.parse().ok())
                .expect("fence")
        };
        assert!(
            fence_of(&ran[1]) > fence_of(&ran[0]),
            "fences rise: {ran:?}"
        );
        // The killed run's entry says expired, and that it was attempt 1.
        let entries = ctx.history(&key);
        let expired: Vec<&Value> = entries
            .iter()
            .filter(|e| e["outcome"] == "expired")
            .collect();
        assert_eq!(expired.len(), 1, "{entries:?}");
        assert_eq!(expired[0]["fence"], fence_of(&ran[0]));
        assert_eq!(expired[0]["once"]["attempt"], 1, "{}", expired[0]);
        let r = record(ctx, &key);
        assert_eq!(
            (r["state"].clone(), r["runs"].clone()),
            ("done".into(), 2.into()),
            "{r}"
        );
        let shown = ctx.baton(["log", key.as_str()]).run();
        assert!(shown.stdout.contains("expired"), "{}", shown.stdout);
        drop(a);
    });
}

#[test]
fn a_sequence_runs_in_order_skips_replays_and_refuses_gaps_with_80() {
    for_each_store(|ctx| {
        let key = ctx.key("chain");
        let step = |n: &str, code: i32| {
            let script = format!(
                "echo \"step $BATON_SEQ attempt $BATON_ATTEMPT\" >> \"$TEST_DIR/log\"; exit {code}"
            );
            once(ctx, &format!("s{n}"), &key, &["--seq", n], &script).run()
        };
        let gap = step("2", 0);
        gap.assert_code(80);
        assert!(
            gap.stderr.contains("the last completed step is 0"),
            "{}",
            gap.stderr
        );
        step("1", 0).assert_code(0);
        let replay = step("1", 0);
        replay.assert_code(0);
        assert!(
            replay.stderr.contains("step 1 already completed"),
            "{}",
            replay.stderr
        );
        let gap = step("3", 0);
        gap.assert_code(80);
        assert!(
            gap.stderr.contains("the last completed step is 1"),
            "{}",
            gap.stderr
        );
        // A failed step may be tried again with the same number.
        step("2", 5).assert_code(5);
        step("2", 0).assert_code(0);
        step("2", 0).assert_code(0);
        step("1", 0).assert_code(0);
        step("3", 0).assert_code(0);
        assert_eq!(
            runs(ctx),
            vec![
                "step 1 attempt 1",
                "step 2 attempt 1",
                "step 2 attempt 2",
                "step 3 attempt 1"
            ]
        );
        assert_eq!(record(ctx, &key)["done_seq"], 3);
    });
}

#[test]
fn retain_bounds_how_long_a_success_is_remembered() {
    // Long enough that A's exit, a status and B fit inside it on a loaded CI machine (2 s once
    // did not): each is a process of its own, and through a server two hops.
    let retain = Duration::from_secs(6);
    for_each_store(|ctx| {
        let key = ctx.key("nightly");
        let flags = ["--retain", "6s"];
        once(ctx, "A", &key, &flags, &logged("A", "0", 0))
            .run()
            .assert_code(0);
        // A's success was recorded before it exited: forgotten by `retain` from now at the latest.
        let forgotten_by = Instant::now() + retain;
        let forget_at = record(ctx, &key)["forget_at"].clone();
        assert!(forget_at.is_string(), "{forget_at}");
        once(ctx, "B", &key, &flags, &logged("B", "0", 0))
            .run()
            .assert_code(0);
        assert_eq!(runs(ctx).len(), 1, "remembered: B skipped");
        let margin = Duration::from_millis(100);
        std::thread::sleep(forgotten_by.saturating_duration_since(Instant::now()) + margin);
        once(ctx, "C", &key, &flags, &logged("C", "0", 0))
            .run()
            .assert_code(0);
        let ran = runs(ctx);
        assert_eq!(ran.len(), 2, "forgotten after --retain: C ran: {ran:?}");
        assert!(ran[1].starts_with("ran C "), "{ran:?}");
    });
}

#[test]
fn bad_flags_are_refused_before_anything_runs() {
    for_each_store(|ctx| {
        let key = ctx.key("bad");
        for flags in [
            vec!["--seq", "0"],
            vec!["--max-attempts", "0"],
            vec!["--retain", "10ms"],
        ] {
            let done = once(ctx, "X", &key, &flags, &logged("X", "0", 0)).run();
            done.assert_refused(&[2]);
        }
        assert!(runs(ctx).is_empty());
        let no_record = ctx.baton(["retry", key.as_str()]).run();
        no_record.assert_refused(&[1]);
    });
}
