//! Named pools (`--slots a,b,c`) through real processes on every store: a turn for one slot by
//! name waits for it while other turns take the other slots, `--count 2` takes two at once, a
//! holder killed with `kill -9` frees its slot once its lease runs out, a ticket with another
//! slot list is refused while the key is in use, jobs on a pool run with their slot, and `baton
//! why` names the slot a waiting job needs. How many at once, and one holder per slot under
//! load, is `exclusion.rs`'s pool test.

use baton_testkit as common;

use std::time::Duration;

use common::{for_each_store, Ctx, Done, PROMPT};
use serde_json::Value;

const POOL: &str = "a,b,c";

/// `baton acquire KEY --slots a,b,c EXTRA --json`.
fn acquire(ctx: &Ctx, key: &str, extra: &[&str]) -> Done {
    let mut args = vec!["acquire", key, "--slots", POOL, "--ttl", "1m", "--json"];
    args.extend_from_slice(extra);
    ctx.baton(&args).run()
}

/// The turn `acquire --json` printed.
fn turn(done: &Done) -> Value {
    done.assert_code(0);
    serde_json::from_str(done.stdout.trim()).expect("acquire --json prints one object")
}

fn release(ctx: &Ctx, key: &str, turn: &Value) {
    let token = turn["token"].as_str().expect("a token");
    ctx.baton(["release", key, token]).run().assert_code(0);
}

#[test]
fn a_named_slot_waits_while_the_other_slots_are_used() {
    for_each_store(|ctx| {
        let key = ctx.key("devices");
        let a = turn(&acquire(ctx, &key, &["--slot", "a"]));
        assert_eq!(a["slot"], "a");
        // Another wants a: it waits, and keeps a for itself...
        let mut wants_a = ctx
            .baton([
                "run",
                &key,
                "--slots",
                POOL,
                "--slot",
                "a",
                "--poll",
                "100ms",
                "--",
                "sh",
                "-c",
                r#"echo "$BATON_SLOT" > "$TEST_DIR/got""#,
            ])
            .spawn();
        ctx.wait_status("the run for a queued", &key, PROMPT, |view| {
            view.queue().len() == 1
        });
        // ... while a turn for any slot passes it and takes b, the first free one.
        let b = turn(&acquire(ctx, &key, &["--timeout", "0"]));
        assert_eq!(b["slot"], "b", "{b}");
        // Two at once: only c is free (a is kept for the waiting run).
        let two = acquire(ctx, &key, &["--count", "2", "--timeout", "0"]);
        two.assert_code(75);
        let view = ctx.key_view(&key);
        assert_eq!(view.raw["slots"][0]["holder"], a["id"], "{}", view.raw);
        assert_eq!(view.raw["queue"][0]["wants_slot"], "a", "{}", view.raw);
        release(ctx, &key, &a);
        wants_a.wait(PROMPT).assert_code(0);
        assert_eq!(ctx.read("got").trim(), "a");
        release(ctx, &key, &b);
        let two = turn(&acquire(ctx, &key, &["--count", "2"]));
        assert_eq!(two["slots"], serde_json::json!(["a", "b"]), "{two}");
        assert_eq!(two["slot"], "a,b");
        release(ctx, &key, &two);
    });
}

#[test]
fn a_holder_killed_frees_its_slot_after_its_lease() {
    for_each_store(|ctx| {
        let key = ctx.key("seats");
        let mut holder = ctx
            .baton([
                "run",
                &key,
                "--slots",
                POOL,
                "--slot",
                "c",
                "--ttl",
                "2s",
                "--",
                "sh",
                "-c",
                r#"touch "$TEST_DIR/holding"; sleep 60"#,
            ])
            .spawn();
        ctx.wait_file("holding", PROMPT);
        holder.kill();
        let started = std::time::Instant::now();
        let c = turn(&acquire(ctx, &key, &["--slot", "c", "--poll", "100ms"]));
        assert_eq!(c["slot"], "c");
        assert!(
            started.elapsed() < PROMPT + Duration::from_secs(2),
            "c came back within its lease"
        );
        release(ctx, &key, &c);
    });
}

#[test]
fn another_slot_list_is_refused_while_the_key_is_in_use() {
    for_each_store(|ctx| {
        let key = ctx.key("envs");
        let a = turn(&acquire(ctx, &key, &[]));
        let other = ctx
            .baton(["acquire", &key, "--slots", "a,b", "--timeout", "0"])
            .run();
        other.assert_code(1);
        assert!(
            other.stderr.contains("use the same --slots as the others"),
            "{}",
            other.describe()
        );
        let plain = ctx.baton(["acquire", &key, "--timeout", "0"]).run();
        plain.assert_code(1);
        let bad = ctx
            .baton(["acquire", &key, "--slots", POOL, "--slot", "d"])
            .run();
        bad.assert_code(2);
        assert!(
            bad.stderr.contains("not one of the pool's slots"),
            "{}",
            bad.describe()
        );
        release(ctx, &key, &a);
        // Idle again: the pool may change.
        let changed = ctx
            .baton(["acquire", &key, "--slots", "x,y", "--json"])
            .run();
        assert_eq!(turn(&changed)["slot"], "x");
    });
}

/// Jobs on a pool (`submit --slots`): a worker running two at once hands each job its slot in
/// `BATON_SLOT`, never one slot to two jobs at once, and the history names each run's slot.
#[test]
fn jobs_on_a_pool_run_with_their_slot() {
    for_each_store(|ctx| {
        let key = ctx.key("devices");
        for n in 1..=4 {
            let id = format!("j{n}");
            ctx.baton(["submit", &key, "--slots", "d1,d2", "--id", &id])
                .run()
                .assert_code(0);
        }
        let job = r#"mkdir "$TEST_DIR/slot-$BATON_SLOT" || echo "$BATON_SLOT" >> "$TEST_DIR/overlaps"
echo "$BATON_JOB_ID $BATON_SLOT" >> "$TEST_DIR/ran"
sleep 0.3
rmdir "$TEST_DIR/slot-$BATON_SLOT""#;
        let mut worker = ctx
            .baton([
                "worker",
                &key,
                "--concurrency",
                "2",
                "--poll",
                "100ms",
                "--",
                "sh",
                "-c",
                job,
            ])
            .spawn();
        common::wait_for("four jobs run", PROMPT, || {
            (ctx.lines("ran").len() == 4).then_some(())
        });
        common::send_signal(worker.pid(), libc::SIGTERM);
        worker.wait(PROMPT).assert_code(0);
        assert_eq!(ctx.read("overlaps"), "", "a slot ran two jobs at once");
        let ran = ctx.lines("ran");
        assert!(
            ran.iter()
                .all(|line| line.ends_with(" d1") || line.ends_with(" d2")),
            "{ran:?}"
        );
        let history = ctx.history(&key);
        assert!(
            history
                .iter()
                .all(|e| e["slots"].as_array().is_some_and(|s| s.len() == 1)),
            "{history:?}"
        );
    });
}

/// `baton why` on a pool: the slot a job waits for by name and who holds it, or how many slots
/// a job needs and which are free; a running job's slot.
#[test]
fn why_names_the_slot_a_waiting_job_needs() {
    for_each_store(|ctx| {
        let key = ctx.key("devices");
        let held = ctx
            .baton(["acquire", &key, "--slots", "d1,d2", "--ttl", "1m", "--json"])
            .run();
        let held = turn(&held);
        let submit = |id: &str, extra: &[&str]| {
            let mut args = vec!["submit", key.as_str(), "--slots", "d1,d2", "--id", id];
            args.extend_from_slice(extra);
            ctx.baton(&args).run().assert_code(0);
        };
        submit("j1", &["--slot", "d1"]);
        submit("j2", &["--count", "2"]);
        let why = ctx.baton(["why", &key, "j1"]).run();
        why.assert_code(0);
        let holder = held["id"].as_str().expect("an id");
        assert!(
            why.stdout
                .contains(&format!("it needs the slot d1, held by turn {holder}")),
            "{}",
            why.stdout
        );
        assert!(
            why.stdout.contains(&format!("turn {holder} on slot d1 by")),
            "{}",
            why.stdout
        );
        let why = ctx.baton(["why", &key, "j2"]).run();
        assert!(
            why.stdout
                .contains("it needs 2 slots at once of the pool d1,d2; free: d2"),
            "{}",
            why.stdout
        );
        release(ctx, &key, &held);
        let mut worker = ctx
            .baton(["worker", &key, "--poll", "100ms", "--", "sleep", "30"])
            .spawn();
        ctx.wait_status("j1 runs", &key, PROMPT, |view| !view.holders().is_empty());
        let why = ctx.baton(["why", &key, "j1"]).run();
        assert!(
            why.stdout.contains("j1: running on slot d1 (attempt 1"),
            "{}",
            why.stdout
        );
        common::send_signal(worker.pid(), libc::SIGKILL);
        worker.wait(PROMPT);
    });
}
