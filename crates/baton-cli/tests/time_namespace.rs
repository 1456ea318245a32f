//! SQLite's store clock across time namespaces.
//!
//! The SQLite store's clock is the host's boot-time clock, named by the host's boot id. A
//! process in a time namespace (`unshare -T`, a container restored by CRIU) reads
//! `CLOCK_BOOTTIME` shifted by its namespace's offset (`/proc/self/timens_offsets`); baton
//! subtracts the offset, so every process on the host reads the same clock. These tests start
//! one `baton run` in a namespace whose boot-time clock reads an hour ahead of the host's, or up
//! to an hour behind, and another outside it, with a 2 s TTL:
//! - a renewing holder is never taken over, whichever of the two reads ahead;
//! - a killed holder is taken over within the TTL and a little, not an offset early or late;
//! - without /proc, where neither the offsets nor the boot id can be read, the store refuses.
//!
//! They need `unshare` (util-linux 2.36 or later) and a kernel that lets this process make a
//! time namespace (Linux 5.6 or later with `CONFIG_TIME_NS`, and root; the last test, a mount
//! namespace too). When the kernel refuses, they say so on stderr (`SKIPPED: …`) and pass, except
//! under CI (which runs them as root on such a kernel), where the refusal is a failure.

use baton_testkit as common;

use std::process::Command;
use std::time::Duration;

use common::{baton_bin, pid_alive, wait_until, with_fresh_sqlite, Ctx, PROMPT};

/// The leases of these tests.
const TTL: Duration = Duration::from_secs(2);
const TTL_FLAG: &str = "2s";

/// The boot-time offset of the namespace that reads ahead, in seconds.
const AHEAD_SECS: i64 = 3600;

/// Whether this kernel lets us make time namespaces: `Err` says why not. Anything else that
/// stops the probe (no `unshare`, one too old for `-T`) fails the test: that is the test
/// machine's to fix, not a reason to skip.
fn time_namespaces() -> Result<(), String> {
    let probe = Command::new("unshare")
        .args([
            "--fork",
            "-T",
            "--boottime",
            "3600",
            "cat",
            "/proc/self/timens_offsets",
        ])
        .output()
        .unwrap_or_else(|error| {
            panic!("cannot run `unshare` (util-linux 2.36 or later; Debian: util-linux): {error}")
        });
    let stdout = String::from_utf8_lossy(&probe.stdout);
    let stderr = String::from_utf8_lossy(&probe.stderr);
    if probe.status.success() {
        let shifted = stdout
            .lines()
            .any(|line| line.split_whitespace().collect::<Vec<_>>() == ["boottime", "3600", "0"]);
        assert!(
            shifted,
            "`unshare -T --boottime 3600` ran, but its child's /proc/self/timens_offsets does not \
             say `boottime 3600 0`:\n{stdout}"
        );
        return Ok(());
    }
    // util-linux words a refused unshare(2) as `unshare: unshare failed: <errno text>`.
    assert!(
        stderr.contains("unshare failed"),
        "`unshare --fork -T --boottime 3600` failed for a reason other than the kernel refusing \
         (is util-linux older than 2.36?): {}\n{stderr}",
        probe.status
    );
    Err(stderr.trim().to_owned())
}

/// Runs `test` when time namespaces can be made here; otherwise says loudly why not (and fails
/// under CI, whose machines allow them).
fn with_time_namespaces(test: impl Fn(&Ctx)) {
    match time_namespaces() {
        Ok(()) => with_fresh_sqlite(test),
        Err(why) if std::env::var_os("CI").is_some() => panic!(
            "the kernel refused a time namespace under CI, where these tests must run (as root, \
             on Linux 5.6 or later with CONFIG_TIME_NS): {why}"
        ),
        Err(why) => eprintln!(
            "SKIPPED: time-namespace tests not run: the kernel refused `unshare -T` ({why}); \
             they need root and Linux 5.6 or later with CONFIG_TIME_NS"
        ),
    }
}

/// How far behind the host's the namespace that reads behind is, in seconds: an hour, or less
/// on a host up for less than that (a boot-time clock cannot be set before its boot).
fn behind_secs() -> i64 {
    let uptime = std::fs::read_to_string("/proc/uptime").expect("read /proc/uptime");
    let secs: f64 = uptime
        .split_whitespace()
        .next()
        .and_then(|first| first.parse().ok())
        .unwrap_or_else(|| panic!("/proc/uptime does not start with seconds: {uptime}"));
    // Whole seconds, 20 s to spare; at least 10 s (five TTLs), waiting for the host to get there.
    let secs = secs as i64;
    if secs < 30 {
        std::thread::sleep(Duration::from_secs((30 - secs) as u64));
        return 10;
    }
    (secs - 20).min(3600)
}

/// Spawns `baton run KEY --ttl 2s --poll 100ms --context NAME -- sh -c COMMAND`, in a time
/// namespace whose boot-time clock reads `offset_secs` ahead of the host's (behind when
/// negative), or directly when `offset_secs` is 0. unshare forks: baton is its child, in the
/// same process group, so [`common::Proc::kill`] kills both.
fn run_at(ctx: &Ctx, offset_secs: i64, name: &str, key: &str, command: &str) -> common::Proc {
    let run = [
        "run",
        key,
        "--ttl",
        TTL_FLAG,
        "--poll",
        "100ms",
        "--context",
        name,
        "--",
        "sh",
        "-c",
        command,
    ];
    if offset_secs == 0 {
        return ctx.baton(run).name(name).spawn();
    }
    let offset = offset_secs.to_string();
    let bin = baton_bin().to_string_lossy().into_owned();
    let mut args: Vec<&str> = vec!["--fork", "--kill-child", "-T", "--boottime", &offset, &bin];
    args.extend_from_slice(&run);
    ctx.program(name, "unshare", args).spawn()
}

/// A command that logs its start and end, records its fence and pid, checks that nobody else
/// holds the resource (an atomic `mkdir`), and runs for `seconds`.
fn exclusive_command(name: &str, seconds: u32) -> String {
    format!(
        r#"mkdir "$TEST_DIR/held" 2>/dev/null || echo "{name}" >> "$TEST_DIR/overlaps"
echo "{name} start" >> "$TEST_DIR/log"
echo "$BATON_FENCE" > "$TEST_DIR/{name}.fence"
echo $$ > "$TEST_DIR/{name}.pid"
sleep {seconds}
echo "{name} end" >> "$TEST_DIR/log"
rmdir "$TEST_DIR/held""#
    )
}

/// A holder renews a 2 s lease through a 6 s command; a waiter whose boot-time clock reads
/// differently waits it out: its command starts only after the holder's ended, with a larger
/// fence. Ahead and behind, holder and waiter: where the waiter's clock reads later than the
/// holder's, an uncorrected clock lets the waiter straight in.
#[test]
fn a_waiter_in_another_time_namespace_waits_for_a_renewing_holder() {
    with_time_namespaces(|ctx| {
        let behind = -behind_secs();
        for (round, (holder_offset, waiter_offset)) in
            [(0, AHEAD_SECS), (behind, 0), (AHEAD_SECS, 0), (0, behind)]
                .into_iter()
                .enumerate()
        {
            eprintln!("holder at {holder_offset:+} s, waiter at {waiter_offset:+} s");
            exclusion_between(ctx, round, holder_offset, waiter_offset);
        }
    });
}

fn exclusion_between(ctx: &Ctx, round: usize, holder_offset: i64, waiter_offset: i64) {
    let key = ctx.key(&format!("timens-exclusion-{round}"));
    let (holder_name, waiter_name) = (format!("H{round}"), format!("W{round}"));
    let holder_command = exclusive_command(&holder_name, 6);
    let mut holder = run_at(ctx, holder_offset, &holder_name, &key, &holder_command);
    let holder_pid = ctx.wait_pid(&format!("{holder_name}.pid"), PROMPT);
    ctx.kill_group_on_drop(holder_pid);

    let waiter_command = exclusive_command(&waiter_name, 0);
    let mut waiter = run_at(ctx, waiter_offset, &waiter_name, &key, &waiter_command);
    // The waiter on the key, or (when it was let in) its command started.
    let waiter_started = ctx.path(&format!("{waiter_name}.pid"));
    let view = ctx.wait_status(&format!("{waiter_name} on the key"), &key, PROMPT, |view| {
        let contexts = [view.queue_contexts(), view.holder_contexts()].concat();
        contexts.contains(&waiter_name) || waiter_started.exists()
    });
    assert!(
        !waiter_started.exists() && view.holder_contexts() == [holder_name.clone()],
        "the waiter took the key of a holder whose lease stands; log: {:?}, status: {}",
        ctx.log(),
        view.raw
    );

    holder.wait(PROMPT).assert_code(0);
    waiter.wait(PROMPT).assert_code(0);
    assert_eq!(
        ctx.read("overlaps"),
        "",
        "two commands held the key at once"
    );
    let log: Vec<String> = ctx
        .log()
        .into_iter()
        .filter(|line| {
            let who = line.split(' ').next().unwrap_or_default();
            who == holder_name || who == waiter_name
        })
        .collect();
    assert_eq!(
        log,
        [
            format!("{holder_name} start"),
            format!("{holder_name} end"),
            format!("{waiter_name} start"),
            format!("{waiter_name} end"),
        ],
        "the waiter's command must start only after the holder's ended"
    );
    assert!(
        ctx.written_fence(&waiter_name) > ctx.written_fence(&holder_name),
        "fences increase whatever namespace the granting process is in"
    );
}

/// A holder is killed (its process group: unshare, baton, and by the parent-death signal its
/// command): a waiter whose boot-time clock reads differently takes over within the TTL and a
/// little. Where the holder's clock read later than the waiter's, an uncorrected clock kept the
/// key held for the whole offset.
#[test]
fn a_waiter_in_another_time_namespace_takes_over_a_killed_holder_within_the_ttl() {
    with_time_namespaces(|ctx| {
        let behind = -behind_secs();
        for (round, (holder_offset, waiter_offset)) in
            [(AHEAD_SECS, 0), (0, behind)].into_iter().enumerate()
        {
            eprintln!("holder at {holder_offset:+} s, waiter at {waiter_offset:+} s");
            takeover(ctx, round, holder_offset, waiter_offset);
        }
    });
}

fn takeover(ctx: &Ctx, round: usize, holder_offset: i64, waiter_offset: i64) {
    let key = ctx.key(&format!("timens-takeover-{round}"));
    let (holder_name, waiter_name) = (format!("H{round}"), format!("W{round}"));
    let holder_command = format!(r#"echo $$ > "$TEST_DIR/{holder_name}.pid"; exec sleep 120"#);
    let mut holder = run_at(ctx, holder_offset, &holder_name, &key, &holder_command);
    let holder_command_pid = ctx.wait_pid(&format!("{holder_name}.pid"), PROMPT);
    ctx.kill_group_on_drop(holder_command_pid);

    let waiter_command = format!(r#"echo ran > "$TEST_DIR/{waiter_name}.ran""#);
    let mut waiter = run_at(ctx, waiter_offset, &waiter_name, &key, &waiter_command);
    ctx.wait_queued(&key, &waiter_name);

    holder.kill();
    wait_until("the holder's command is gone", PROMPT, || {
        !pid_alive(holder_command_pid)
    });
    // Never an offset late: the TTL, the waiter's poll and slack for a loaded machine.
    let bound = TTL + Duration::from_secs(10);
    let ran = ctx.path(&format!("{waiter_name}.ran"));
    wait_until(
        &format!("the waiter to take over the killed holder within {bound:?}"),
        bound,
        || ran.exists(),
    );
    waiter.wait(PROMPT).assert_code(0);
}

/// Without /proc (a tmpfs over it, in a mount namespace of its own) a process cannot know its
/// time namespace's offsets nor the boot id: the SQLite store refuses, saying why, rather than
/// judge leases on a clock other processes may not share.
#[test]
fn without_proc_the_sqlite_store_refuses_rather_than_guess_its_clock() {
    with_time_namespaces(|ctx| {
        let key = ctx.key("no-proc");
        let script = r#"mount -t tmpfs none /proc && exec "$TEST_BATON" run "$KEY" -- true"#;
        let done = ctx
            .program(
                "no-proc",
                "unshare",
                ["--mount", "--fork", "sh", "-c", script],
            )
            .env("KEY", &key)
            .run();
        done.assert_code(1);
        assert!(
            done.stderr
                .contains("the host's boot-time clock cannot be read here")
                && done.stderr.contains("/proc/self/timens_offsets")
                && done.stderr.contains("mount /proc, or use another store"),
            "{}",
            done.describe()
        );
        assert!(ctx.key_status(&key).is_none(), "nothing was written");
    });
}
