//! `baton check KEY --fence F [--min-left DUR]` with real processes on every store: a turn's own
//! command checks it holds (BATON_FENCE); an acquired turn passes before its release and fails
//! after it, naming the new holder; a lease that ran out fails where the store has a clock;
//! `--min-left` is judged on the store's clock and refused where there is none.

use baton_testkit as common;

use std::time::Duration;

use common::{for_each_store, wait_until, Ctx, Done, PROMPT};
use serde_json::Value;

/// The longest a store's answer is allowed to take on a loaded machine, where a reading of the
/// store's clock may lag by that much more than the store's stated uncertainty.
const RESPONSE_TIME_MS: u64 = 2_000;

/// `baton acquire KEY --json EXTRA...`: the turn's token and fence.
fn acquire(ctx: &Ctx, key: &str, extra: &[&str]) -> (String, u64) {
    let mut args = vec!["acquire", key, "--json"];
    args.extend_from_slice(extra);
    let done = ctx.baton(args).run();
    done.assert_code(0);
    let turn: Value = serde_json::from_str(done.stdout.trim()).expect("acquire --json");
    let token = turn["token"].as_str().expect("a token").to_owned();
    let fence = common::as_u64_lenient(&turn["fence"]).expect("a fence");
    (token, fence)
}

/// `baton check KEY --fence F EXTRA... --json`, and its JSON.
fn check(ctx: &Ctx, key: &str, fence: u64, extra: &[&str]) -> (Done, Value) {
    let fence = fence.to_string();
    let mut args = vec!["check", key, "--fence", &fence, "--json"];
    args.extend_from_slice(extra);
    let done = ctx.baton(args).run();
    done.assert_no_panic();
    let json = if done.code == Some(2) {
        Value::Null
    } else {
        serde_json::from_str(done.stdout.trim()).unwrap_or_else(|error| {
            panic!(
                "check --json printed no JSON ({error}):\n{}",
                done.describe()
            )
        })
    };
    (done, json)
}

#[test]
fn a_turn_passes_until_it_is_released_then_fails_naming_who_holds_now() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        let (token, fence) = acquire(ctx, &key, &["--ttl", "5m", "--context", "first"]);
        let (done, json) = check(ctx, &key, fence, &[]);
        done.assert_code(0);
        assert_eq!(json["holds"], true, "{json}");
        assert!(done.stderr.contains(&format!("fence {fence} holds {key}")));
        if ctx.store_has_clock() {
            let left = json["lease_left_ms"]
                .as_u64()
                .expect("lease left on a store clock");
            // A reading of the store's clock lags its time by up to `clock_uncertain_ms` plus
            // the time a response took (S3's `Date` has whole seconds, stamped before moto
            // answers), so the lease left may read a little over the TTL there.
            let slack = ctx.clock_uncertain_ms() + RESPONSE_TIME_MS;
            assert!(
                left > 60_000 && left <= 300_000 + slack,
                "lease left: {left}, slack {slack}"
            );
            check(ctx, &key, fence, &["--min-left", "1m"])
                .0
                .assert_code(0);
            let (short, json) = check(ctx, &key, fence, &["--min-left", "10m"]);
            short.assert_code(78);
            assert_eq!(json["holds"], false);
            assert!(
                short.stderr.contains("less than --min-left"),
                "{}",
                short.describe()
            );
        } else {
            assert!(json["lease_left_ms"].is_null(), "{json}");
            let refused = check(ctx, &key, fence, &["--min-left", "1m"]).0;
            refused.assert_refused(&[2]);
            assert!(
                refused.stderr.contains("no clock"),
                "{}",
                refused.describe()
            );
        }

        ctx.baton(["release", &key, &token]).run().assert_code(0);
        let (after, json) = check(ctx, &key, fence, &[]);
        after.assert_code(78);
        assert_eq!(json["holds"], false);
        assert!(
            after.stderr.contains("nobody holds it now"),
            "{}",
            after.describe()
        );

        let (_, next) = acquire(ctx, &key, &["--ttl", "5m", "--context", "second"]);
        assert!(next > fence);
        let (stale, json) = check(ctx, &key, fence, &[]);
        stale.assert_code(78);
        let why = json["why"].as_str().expect("why");
        assert!(
            why.contains(&format!("last fence is {next}")) && why.contains("second"),
            "the failure names the holder now: {why}"
        );
        check(ctx, &key, next, &[]).0.assert_code(0);
        // A fence never granted on a key never used.
        let (never, _) = check(ctx, &ctx.key("unused"), 7, &[]);
        never.assert_code(78);
        assert!(
            never.stderr.contains("never granted"),
            "{}",
            never.describe()
        );
    });
}

#[test]
fn a_command_under_run_checks_its_own_turn_through_baton_fence() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        let script = format!(
            r#""$TEST_BATON" check {key} >"$TEST_DIR/inside.out" 2>&1; echo $? >"$TEST_DIR/inside.code"
"$TEST_BATON" check {key} --fence 1 >/dev/null 2>&1; echo $? >"$TEST_DIR/other.code""#
        );
        ctx.baton(["run", &key, "--", "sh", "-c", &script])
            .run()
            .assert_code(0);
        assert_eq!(
            ctx.read("inside.code").trim(),
            "0",
            "{}",
            ctx.read("inside.out")
        );
        assert_eq!(ctx.read("other.code").trim(), "78", "another fence fails");
        // After run released the turn, its fence no longer holds.
        let fence: u64 = ctx
            .read("inside.out")
            .split_whitespace()
            .nth(2)
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("the check names the fence: {}", ctx.read("inside.out")));
        check(ctx, &key, fence, &[]).0.assert_code(78);
    });
}

#[test]
fn a_lease_that_ran_out_fails_the_check_on_a_store_with_a_clock() {
    for_each_store(|ctx| {
        if !ctx.store_has_clock() {
            eprintln!("no store clock: one read cannot tell a lease ran out (documented)");
            return;
        }
        let key = ctx.key("deploy");
        // Long enough that the acquire's answer and a check, each a process, fit in it on a
        // loaded CI machine.
        let (_token, fence) = acquire(ctx, &key, &["--ttl", "5s"]);
        check(ctx, &key, fence, &[]).0.assert_code(0);
        let mut last = None;
        wait_until("the lease to run out", PROMPT, || {
            let (done, _) = check(ctx, &key, fence, &[]);
            let ended = done.code == Some(78);
            last = Some(done);
            ended || {
                std::thread::sleep(Duration::from_millis(200));
                false
            }
        });
        let done = last.expect("a check ran");
        assert!(
            done.stderr.contains("ran out"),
            "the lease ran out, though the document still lists the turn:\n{}",
            done.describe()
        );
    });
}

#[test]
fn bad_use_is_refused_with_exit_2() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        for args in [
            vec!["check", key.as_str()],
            vec!["check", key.as_str(), "--fence", "x"],
            vec!["check", key.as_str(), "--fence", "1", "--min-left", "soon"],
            vec!["check", "", "--fence", "1"],
        ] {
            ctx.baton(args).run().assert_refused(&[2]);
        }
    });
}

#[test]
fn a_turn_taken_with_acquire_hears_a_cancel_running_ask_through_check() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        let (token, fence) = acquire(ctx, &key, &["--ttl", "5m", "--context", "ci job"]);
        let mut newer = ctx
            .baton(["acquire", &key, "--cancel-running", "--context", "newer"])
            .name("newer")
            .spawn();
        ctx.wait_queued(&key, "newer");
        let (asked, json) = check(ctx, &key, fence, &[]);
        asked.assert_code(76);
        assert_eq!(json["holds"], true, "{json}");
        assert!(
            json["stop_asked"]
                .as_str()
                .is_some_and(|by| by.contains("(newer)")),
            "{json}"
        );
        assert!(
            asked.stderr.contains("asked it to stop"),
            "{}",
            asked.describe()
        );
        // The script stops and gives the turn back, as superseded; the newer one holds.
        ctx.baton(["release", &key, &token, "--outcome", "superseded"])
            .run()
            .assert_code(0);
        let newer_token = newer.wait(PROMPT).assert_code(0).stdout.trim().to_owned();
        assert_eq!(ctx.key_view(&key).holder_contexts(), ["newer"]);
        check(ctx, &key, fence, &[]).0.assert_code(78);
        // Nobody asked the newer turn: it cannot claim superseded.
        let newer_fence = ctx.key_view(&key).fence().expect("a fence");
        check(ctx, &key, newer_fence, &[]).0.assert_code(0);
        let refused = ctx
            .baton(["release", &key, &newer_token, "--outcome", "superseded"])
            .run();
        refused.assert_refused(&[1]);
        assert_eq!(ctx.key_view(&key).holder_contexts(), ["newer"]);
    });
}
