//! `baton acquire --keep-alive`: a keeper process renews a short lease until the turn ends.
//! The command itself returns at once, holding none of its output open (a CI step captures it
//! with `$(…)`); the turn outlives many leases; a release ends the keeper within a few seconds;
//! a keeper killed with -9 frees the key one lease later; `--max-hold` stops the renewals.

use std::time::Duration;

use baton_testkit as common;

use common::{baton_bin, for_each_store, wait_until, with_fresh_sqlite, Ctx, PROMPT};
use serde_json::Value;

/// The lease of the kept-alive turns here: several pass while a test looks.
const TTL: &str = "2s";

/// `acquire --keep-alive --json` as a CI step runs it, its output captured by `$(…)`, which
/// ends only when every holder of the pipe has closed it: the keeper must not be one. Returns
/// the turn's JSON object.
fn acquire_kept(ctx: &Ctx, key: &str, extra: &str) -> Value {
    let script = format!(
        r#"turn=$("$TEST_BATON" acquire --keep-alive --ttl {TTL} {extra} --json "$KEY") || exit 9
           printf '%s\n' "$turn""#
    );
    let done = ctx
        .sh("acquire-kept", &script)
        .env("KEY", key)
        .env("XDG_STATE_HOME", ctx.path("state"))
        .run_within(PROMPT);
    done.assert_code(0);
    let turn: Value = serde_json::from_str(done.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {}", done.describe()));
    assert!(turn["keeper_pid"].as_u64().is_some(), "{turn}");
    turn
}

fn keeper_pid(turn: &Value) -> i32 {
    let pid = turn["keeper_pid"].as_u64().expect("keeper_pid");
    i32::try_from(pid).expect("a pid")
}

/// Whether `pid` runs (a zombie, waiting to be reaped, does not).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.to_owned()))
        .is_some_and(|rest| !rest.starts_with('Z'))
}

/// The keeper's log, from the state directory the test gave it: empty until the keeper has
/// made its directory (a test may look before it has).
fn keeper_log(ctx: &Ctx) -> String {
    let dir = ctx.path("state").join("baton").join("keepers");
    let mut text = String::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return text;
    };
    for entry in entries {
        let path = entry.expect("an entry").path();
        text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
    }
    text
}

/// The outcome of the newest ended turn in `key`'s history.
fn last_outcome(ctx: &Ctx, key: &str) -> String {
    let history = ctx.history(key);
    let ended = history.iter().find(|entry| entry["outcome"].is_string());
    ended.map_or_else(String::new, |entry| entry["outcome"].to_string())
}

/// The next caller gets `key` once the kept turn's lease has run out (recorded expired).
fn taken_after_the_lease_ran_out(ctx: &Ctx, key: &str) {
    let next = ctx
        .baton(["acquire", key, "--timeout", "20s", "--ttl", "1m", "-q"])
        .run();
    next.assert_code(0);
    assert_eq!(last_outcome(ctx, key), "\"expired\"");
    ctx.baton(["release", key, next.stdout.trim()])
        .run()
        .assert_code(0);
}

#[test]
fn a_kept_turn_outlives_its_lease_until_released_then_the_keeper_ends() {
    for_each_store(|ctx| {
        let key = ctx.key("kept");
        let turn = acquire_kept(ctx, &key, "");
        let pid = keeper_pid(&turn);
        // Three leases later the turn still holds the key.
        std::thread::sleep(Duration::from_secs(6));
        let holders = ctx.key_view(&key).holders();
        assert_eq!(holders.len(), 1, "{:?}", ctx.key_view(&key).raw);
        assert_eq!(holders[0].id, turn["id"].as_str().expect("id"));
        assert!(running(pid), "the keeper runs while the turn holds");

        let token = turn["token"].as_str().expect("token");
        ctx.baton(["release", &key, token]).run().assert_code(0);
        wait_until("the keeper to end after the release", PROMPT, || {
            !running(pid)
        });
        assert!(
            keeper_log(ctx).contains("the turn is over"),
            "{}",
            keeper_log(ctx)
        );
        assert_eq!(last_outcome(ctx, &key), "\"succeeded\"");
    });
}

#[test]
fn a_killed_keeper_frees_the_key_one_lease_later() {
    for_each_store(|ctx| {
        let key = ctx.key("killed");
        let turn = acquire_kept(ctx, &key, "");
        let pid = keeper_pid(&turn);
        std::thread::sleep(Duration::from_secs(3));
        // SAFETY: kill(2) on a pid this test started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        taken_after_the_lease_ran_out(ctx, &key);
    });
}

#[test]
fn max_hold_stops_the_renewals_and_the_lease_runs_out() {
    for_each_store(|ctx| {
        let key = ctx.key("bounded");
        let turn = acquire_kept(ctx, &key, "--max-hold 3s");
        let pid = keeper_pid(&turn);
        wait_until("the keeper to stop at --max-hold", PROMPT, || !running(pid));
        assert!(
            keeper_log(ctx).contains("--max-hold (3s) passed"),
            "{}",
            keeper_log(ctx)
        );
        taken_after_the_lease_ran_out(ctx, &key);
    });
}

/// A `baton` replaced on disk while `acquire --keep-alive` waited (an upgrade in the middle of a
/// CI job) still starts its keeper: the keeper runs the program the waiting process runs.
#[test]
fn the_keeper_starts_even_when_baton_was_removed_while_acquire_waited() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("upgraded");
        let holder = ctx.baton(["acquire", &key, "--ttl", "1m"]).run();
        holder.assert_code(0);
        let copy = ctx.path("baton-copy");
        std::fs::copy(baton_bin(), &copy).expect("a copy of baton");
        let mut waiter = ctx
            .sh(
                "waiter",
                r#""$COPY" acquire --keep-alive --ttl 2s --json "$KEY""#,
            )
            .env("COPY", &copy)
            .env("KEY", &key)
            .env("XDG_STATE_HOME", ctx.path("state"))
            .spawn();
        wait_until("the waiter to queue", PROMPT, || {
            ctx.key_view(&key).queue().len() == 1
        });
        std::fs::remove_file(&copy).expect("remove the copy");
        ctx.baton(["release", &key, holder.stdout.trim()])
            .run()
            .assert_code(0);
        let done = waiter.wait(PROMPT);
        done.assert_code(0);
        let turn: Value = serde_json::from_str(done.stdout.trim())
            .unwrap_or_else(|e| panic!("{e}: {}", done.describe()));
        let pid = keeper_pid(&turn);
        assert!(running(pid), "the keeper runs: {}", keeper_log(ctx));
        let token = turn["token"].as_str().expect("token");
        ctx.baton(["release", &key, token]).run().assert_code(0);
        wait_until("the keeper to end after the release", PROMPT, || {
            !running(pid)
        });
    });
}

/// An `acquire --keep-alive` killed after its keeper started but before it handed the turn to
/// its caller (here: blocked printing the token into a full pipe) leaves a keeper whose turn
/// nobody knows: the keeper gives it back at once, rather than renew it for `--max-hold`.
#[test]
fn an_acquire_killed_before_handing_its_turn_over_has_it_given_back() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("unhanded");
        // A FIFO opened both ways and filled to its capacity: the token's write blocks.
        let script = r#"cd "$TEST_DIR" && mkfifo full && exec 3<>full
            dd if=/dev/zero bs=65536 count=1 >&3 2>/dev/null
            "$TEST_BATON" acquire --keep-alive --ttl 60s "$KEY" >&3 &
            echo $! > acquire.pid
            wait"#;
        let mut shell = ctx
            .sh("blocked-acquire", script)
            .env("KEY", &key)
            .env("XDG_STATE_HOME", ctx.path("state"))
            .spawn();
        let pid = ctx.wait_pid("acquire.pid", PROMPT);
        wait_until("the keeper started", PROMPT, || {
            keeper_log(ctx).contains("keeping")
        });
        assert!(ctx.key_view(&key).holders().len() == 1, "the turn is held");
        // SAFETY: kill(2) on a pid this test started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        // Given back by the keeper, long before its 60 s lease could run out.
        wait_until("the turn given back", Duration::from_secs(15), || {
            ctx.key_status(&key)
                .is_none_or(|view| view.holders().is_empty())
        });
        assert_eq!(last_outcome(ctx, &key), "\"cancelled\"");
        wait_until("the keeper ended", PROMPT, || {
            keeper_log(ctx).contains("before it handed the turn to its caller")
        });
        shell.kill();
    });
}
