//! CMD's whole process group dies with baton: `kill -9` of a `baton run` or a `baton worker`
//! takes CMD and everything it started in its group with it (a grandchild that ignores SIGTERM
//! included), well before the lease could end; CMD's exit status still reaches baton as it was.

use baton_testkit as common;

use std::time::{Duration, Instant};

use common::{for_each_store, pid_alive, send_signal, wait_until, Ctx, Proc, PROMPT};

/// The TTL of the killed holder: its command must be gone well before another could be granted.
const TTL: &str = "3s";

/// How long after `kill -9` CMD and its grandchild may still be seen alive: well under [`TTL`].
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// CMD: starts a grandchild in its process group that ignores SIGTERM (the disposition survives
/// `exec`) and records its pid, records its own pid, then waits.
fn stubborn_family(name: &str) -> String {
    format!(
        r#"sh -c 'trap "" TERM; echo $$ > "$TEST_DIR/{name}.grandchild"; exec sleep 120' &
echo $$ > "$TEST_DIR/{name}.pid"; wait"#
    )
}

/// The process group and the parent of `pid`, from /proc.
fn pgid_and_ppid(pid: i32) -> (i32, i32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    let (_, rest) = stat.rsplit_once(')').expect("a stat line");
    // After the command name: state, ppid, pgrp.
    let fields: Vec<i32> = rest
        .split_whitespace()
        .skip(1)
        .take(2)
        .map(|field| field.parse().expect("a number"))
        .collect();
    (fields[1], fields[0])
}

/// Waits for CMD and its grandchild to record their pids; checks they share a process group of
/// their own (not baton's); kills `baton` with SIGKILL and checks both are gone within
/// [`GONE_WITHIN`].
fn kill_baton_and_check_the_family_dies(ctx: &Ctx, baton: &Proc, name: &str) {
    let cmd = ctx.wait_pid(&format!("{name}.pid"), PROMPT);
    let grandchild = ctx.wait_pid(&format!("{name}.grandchild"), PROMPT);
    let (group, _) = pgid_and_ppid(cmd);
    ctx.kill_group_on_drop(group);
    assert_eq!(
        pgid_and_ppid(grandchild).0,
        group,
        "the grandchild is in CMD's process group"
    );
    assert_ne!(
        group,
        baton.pid(),
        "CMD runs in a process group apart from baton's"
    );
    send_signal(baton.pid(), libc::SIGKILL);
    let killed_at = Instant::now();
    // The group's leader (the supervisor) goes last, a moment after the processes it killed:
    // all three must be gone within the bound, not the leader at the instant the others are.
    wait_until(
        "CMD, its SIGTERM-ignoring grandchild and its process group's leader to die with baton",
        GONE_WITHIN,
        || !pid_alive(cmd) && !pid_alive(grandchild) && !pid_alive(group),
    );
    eprintln!(
        "{name}: CMD's family gone {:?} after kill -9",
        killed_at.elapsed()
    );
}

#[test]
fn kill_9_of_run_kills_cmds_whole_process_group() {
    for_each_store(|ctx| {
        let key = ctx.key("family");
        let holder = ctx
            .baton([
                "run",
                &key,
                "--ttl",
                TTL,
                "--",
                "sh",
                "-c",
                &stubborn_family("H"),
            ])
            .name("H")
            .spawn();
        kill_baton_and_check_the_family_dies(ctx, &holder, "H");
        drop(holder);
    });
}

#[test]
fn kill_9_of_a_worker_kills_its_jobs_whole_process_group() {
    for_each_store(|ctx| {
        let key = ctx.key("family-job");
        ctx.baton(["submit", &key]).run().assert_code(0);
        let worker = ctx
            .baton([
                "worker",
                "--poll",
                "100ms",
                "--ttl",
                TTL,
                &key,
                "--",
                "sh",
                "-c",
                &stubborn_family("W"),
            ])
            .name("W")
            .spawn();
        kill_baton_and_check_the_family_dies(ctx, &worker, "W");
        drop(worker);
    });
}

/// CMD's exit status reaches `baton run` as it was: its exit code, or 128 + the signal that
/// killed it, whatever stands between (SIGKILL and a signal that would dump core included).
#[test]
fn run_exits_with_cmds_code_or_its_signal() {
    for_each_store(|ctx| {
        let cases: [(&str, i32); 5] = [
            ("exit 0", 0),
            ("exit 7", 7),
            ("kill -USR1 $$", 128 + libc::SIGUSR1),
            ("kill -KILL $$", 128 + libc::SIGKILL),
            ("ulimit -c 0; kill -SEGV $$", 128 + libc::SIGSEGV),
        ];
        for (script, code) in cases {
            let key = ctx.key("status");
            let done = ctx
                .baton(["run", "-q", &key, "--", "sh", "-c", script])
                .run();
            assert_eq!(done.code, Some(code), "`{script}`: {}", done.describe());
        }
    });
}
