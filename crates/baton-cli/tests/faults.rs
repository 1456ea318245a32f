//! Failures of the processes themselves: a holder killed with `kill -9`, a holder paused past
//! its lease, a holder whose renewal waits for a locked SQLite file, waiters that time out or
//! are interrupted.

use baton_testkit as common;

use std::time::{Duration, Instant};

use common::{
    for_each_store, pid_alive, send_signal, wait_until, with_fresh_sqlite, Ctx, Proc, PROMPT,
};

/// A command that records its pid and fence, then sleeps in place of the shell (`exec`), so the
/// recorded pid is the process that must die with baton.
fn sleeper(name: &str) -> String {
    format!(
        r#"echo "$BATON_FENCE" > "$TEST_DIR/{name}.fence"; echo $$ > "$TEST_DIR/{name}.pid"; exec sleep 120"#
    )
}

/// A command with a grandchild in its process group: records its pid, the
/// grandchild's pid and its fence, then waits for the grandchild.
fn group_sleeper(name: &str) -> String {
    format!(
        r#"sleep 120 & echo $! > "$TEST_DIR/{name}.grandchild"; echo "$BATON_FENCE" > "$TEST_DIR/{name}.fence"; echo $$ > "$TEST_DIR/{name}.pid"; wait"#
    )
}

/// The process group of `pid`, from /proc.
fn pgid_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    let (_, rest) = stat.rsplit_once(')').expect("a stat line");
    // After the command name: state, ppid, pgrp.
    rest.split_whitespace()
        .nth(2)
        .and_then(|field| field.parse().ok())
        .expect("a pgrp field")
}

/// The parent of `pid`, from /proc.
fn ppid_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    let (_, rest) = stat.rsplit_once(')').expect("a stat line");
    rest.split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("a ppid field")
}

/// A command that records its fence and the fact it ran.
fn marker(name: &str) -> String {
    format!(r#"echo "$BATON_FENCE" > "$TEST_DIR/{name}.fence"; echo ran >> "$TEST_DIR/{name}.ran""#)
}

/// `baton run KEY --poll 100ms --context W -- sh -c <marker("W")>`: a waiter whose command only
/// marks that it ran.
fn spawn_marked_waiter(ctx: &Ctx, key: &str) -> Proc {
    ctx.baton([
        "run",
        key,
        "--poll",
        "100ms",
        "--context",
        "W",
        "--",
        "sh",
        "-c",
        &marker("W"),
    ])
    .name("W")
    .spawn()
}

/// The holder's baton is killed with SIGKILL: its command dies with it (its supervisor's
/// parent-death signal), and the waiter is granted within the TTL plus a little.
#[test]
fn killed_holder_is_taken_over_within_its_ttl() {
    for_each_store(|ctx| {
        const TTL: Duration = Duration::from_secs(3);
        let key = ctx.key("kill9");
        let holder = ctx
            .baton([
                "run",
                &key,
                "--ttl",
                "3s",
                "--context",
                "H",
                "--",
                "sh",
                "-c",
                &sleeper("H"),
            ])
            .name("H")
            .spawn();
        let holder_cmd_pid = ctx.wait_pid("H.pid", PROMPT);
        // CMD's process group is its own, led by its supervisor (baton's child, see
        // tests/process_group.rs), not baton's.
        let group = pgid_of(holder_cmd_pid);
        ctx.kill_group_on_drop(group);
        assert_ne!(
            group,
            pgid_of(holder.pid()),
            "CMD runs in its own process group"
        );
        assert_eq!(
            ppid_of(group),
            holder.pid(),
            "the group's leader is baton's child"
        );
        let mut waiter = spawn_marked_waiter(ctx, &key);
        ctx.wait_queued(&key, "W");

        send_signal(holder.pid(), libc::SIGKILL);
        let killed_at = Instant::now();
        wait_until(
            "the killed holder's command to die with it",
            Duration::from_secs(5),
            || !pid_alive(holder_cmd_pid),
        );
        wait_until(
            "the waiter's command to run",
            Duration::from_secs(30),
            || ctx.exists("W.ran"),
        );
        let takeover = killed_at.elapsed();
        eprintln!("takeover {takeover:?} after kill -9 (TTL {TTL:?})");
        assert!(
            takeover <= TTL + Duration::from_secs(3),
            "the waiter took over {takeover:?} after the kill; the TTL is {TTL:?}"
        );
        waiter.wait(PROMPT).assert_code(0);
        assert!(
            ctx.written_fence("W") > ctx.written_fence("H"),
            "the new holder has a larger fence"
        );
        drop(holder);
    });
}

/// The holder's baton is stopped (SIGSTOP, not its command) past its TTL: a waiter takes over;
/// on SIGCONT the stopped baton notices the lost lease, kills its command and exits 78.
#[test]
fn paused_holder_loses_its_lease_and_kills_its_command_on_resume() {
    for_each_store(|ctx| {
        let key = ctx.key("sigstop");
        let mut holder = ctx
            .baton([
                "run",
                &key,
                "--ttl",
                "2s",
                "--context",
                "H",
                "--",
                "sh",
                "-c",
                &group_sleeper("H"),
            ])
            .name("H")
            .spawn();
        let holder_cmd_pid = ctx.wait_pid("H.pid", PROMPT);
        ctx.kill_group_on_drop(pgid_of(holder_cmd_pid));
        let grandchild_pid = ctx.wait_pid("H.grandchild", PROMPT);
        let mut waiter = spawn_marked_waiter(ctx, &key);
        ctx.wait_queued(&key, "W");

        send_signal(holder.pid(), libc::SIGSTOP);
        let stopped_at = Instant::now();
        let resumed = scopeguard_cont(holder.pid());
        wait_until(
            "the waiter to take over from the paused holder",
            Duration::from_secs(30),
            || ctx.exists("W.ran"),
        );
        let takeover = stopped_at.elapsed();
        eprintln!("takeover {takeover:?} after SIGSTOP (TTL 2s)");
        assert!(
            takeover <= Duration::from_secs(2 + 3),
            "the waiter took over {takeover:?} after the holder was paused; the TTL is 2 s"
        );
        waiter.wait(PROMPT).assert_code(0);
        assert!(
            ctx.written_fence("W") > ctx.written_fence("H"),
            "the new holder has a larger fence"
        );
        // Paused baton cannot act: its command still runs (only fences protect now).
        assert!(
            pid_alive(holder_cmd_pid),
            "the paused holder's command is still running"
        );

        drop(resumed); // SIGCONT
        let resumed_at = Instant::now();
        let done = holder.wait(PROMPT);
        done.assert_code(78);
        eprintln!(
            "lost lease reported {:?} after SIGCONT",
            resumed_at.elapsed()
        );
        assert!(
            resumed_at.elapsed() < Duration::from_secs(10),
            "baton took {:?} to notice its lost lease after resuming",
            resumed_at.elapsed()
        );
        wait_until(
            "the paused holder's command to be killed",
            Duration::from_secs(5),
            || !pid_alive(holder_cmd_pid),
        );
        wait_until(
            "the paused holder's grandchild (same process group) to be killed",
            Duration::from_secs(5),
            || !pid_alive(grandchild_pid),
        );
    });
}

/// Another process holds the SQLite file's write lock while the holder's command runs, so its
/// renewal waits: the lease must still end on time. baton's one thread stays free while the
/// renewal waits (it runs on another while CMD does), so the command is killed before the TTL
/// is over twice, with the file still locked, and baton exits 78 once it can write again.
#[test]
fn a_renewal_waiting_for_a_locked_sqlite_file_still_ends_the_lease_on_time() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("locked-file");
        let mut holder = ctx
            .baton(["run", &key, "--ttl", "2s", "--", "sh", "-c", &sleeper("H")])
            .name("H")
            .spawn();
        let cmd_pid = ctx.wait_pid("H.pid", PROMPT);
        let file = rusqlite::Connection::open(ctx.path("baton.db")).expect("open the store file");
        file.execute_batch("BEGIN IMMEDIATE")
            .expect("take the file's write lock");
        let locked_at = Instant::now();
        wait_until(
            "the holder's command to be killed at the end of its lease",
            Duration::from_secs(6),
            || !pid_alive(cmd_pid),
        );
        let killed_after = locked_at.elapsed();
        eprintln!("command killed {killed_after:?} after the file was locked (TTL 2s)");
        assert!(
            killed_after < Duration::from_secs(4),
            "the command ran {killed_after:?} into the file's lock; the TTL is 2 s"
        );
        file.execute_batch("ROLLBACK").expect("let the lock go");
        holder.wait(PROMPT).assert_code(78);
    });
}

/// SIGINT comes while baton's first write waits for the SQLite file's write lock, held by
/// another connection: once the file is free, baton withdraws its ticket and exits 130; its
/// command never runs, though the write, when it lands, finds the key free.
#[test]
fn an_interrupt_while_a_write_waits_for_the_locked_sqlite_file_withdraws_the_ticket() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("interrupted-write");
        let file = rusqlite::Connection::open(ctx.path("baton.db")).expect("open the store file");
        file.execute_batch("BEGIN IMMEDIATE")
            .expect("take the file's write lock");
        let mut waiter = ctx
            .baton(["run", &key, "--", "sh", "-c", &marker("W")])
            .name("W")
            .spawn();
        wait_until(
            "baton's write to wait for the file's lock (a thread in its busy handler's sleep)",
            PROMPT,
            || in_clock_nanosleep(waiter.pid()),
        );
        send_signal(waiter.pid(), libc::SIGINT);
        std::thread::sleep(Duration::from_millis(300));
        file.execute_batch("ROLLBACK").expect("let the lock go");
        let done = waiter.wait(PROMPT);
        done.assert_code(130);
        assert!(
            done.stderr.contains("interrupted while waiting") && !done.stderr.contains("holding"),
            "baton took the turn it was interrupted on (or CMD's death made the 130):\n{}",
            done.describe()
        );
        assert!(!ctx.exists("W.ran"), "the interrupted command ran");
        let view = ctx.key_view(&key);
        assert!(
            view.queue().is_empty() && view.holder_contexts().is_empty(),
            "the interrupted ticket is still there: {}",
            view.raw
        );
    });
}

/// Whether a thread of `pid` is in `clock_nanosleep` (`/proc/PID/task/*/syscall`): SQLite's
/// busy handler sleeping between tries for the write lock; baton sleeps nowhere else.
fn in_clock_nanosleep(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("syscall")).is_ok_and(|line| {
            line.split_whitespace().next() == Some(&libc::SYS_clock_nanosleep.to_string())
        })
    })
}

/// A `baton run` on SQLite makes its calls on its one thread until its command starts (a
/// thread of tokio's blocking pool would outlive the call by seconds): the command finds baton
/// with a single thread.
#[test]
fn run_on_sqlite_starts_its_command_from_a_single_thread() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("one-thread");
        // CMD's parent is its supervisor, whose parent is baton.
        let script = r#"baton=$(sed -n 's/^PPid:\t//p' /proc/$PPID/status); grep '^Threads:' /proc/$baton/status"#;
        let done = ctx
            .baton(["run", "-q", &key, "--", "sh", "-c", script])
            .run();
        done.assert_code(0);
        assert_eq!(
            done.stdout.split_whitespace().collect::<Vec<_>>(),
            ["Threads:", "1"],
            "baton's threads while its command ran"
        );
    });
}

/// Sends SIGCONT to `pid` when dropped, so a failed assertion never leaves a stopped process.
fn scopeguard_cont(pid: i32) -> impl Drop {
    struct Cont(i32);
    impl Drop for Cont {
        fn drop(&mut self) {
            // SAFETY: a plain signal send.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    Cont(pid)
}

/// `--timeout 0` on a held key gives up at once with 75, `--timeout 1s` after about a second,
/// and neither leaves a ticket behind; `baton run`'s command never runs.
#[test]
fn timeouts_exit_75_and_leave_no_ticket() {
    for_each_store(|ctx| {
        let key = ctx.key("busy");
        let mut holder = ctx.spawn_gated("H", &key, &[]);
        ctx.wait_started("H");

        let done = ctx
            .baton(["acquire", &key, "--timeout", "0", "--context", "T0"])
            .run();
        done.assert_code(75);
        assert!(
            done.stdout.trim().is_empty(),
            "no token on a timeout: {}",
            done.describe()
        );
        assert!(
            done.elapsed < Duration::from_secs(5),
            "--timeout 0 took {:?}",
            done.elapsed
        );

        let done = ctx
            .baton([
                "acquire",
                &key,
                "--timeout",
                "1s",
                "--poll",
                "100ms",
                "--context",
                "T1",
            ])
            .run();
        done.assert_code(75);
        assert!(
            done.elapsed >= Duration::from_millis(950) && done.elapsed < Duration::from_secs(6),
            "--timeout 1s took {:?}",
            done.elapsed
        );

        let done = ctx
            .baton([
                "run",
                &key,
                "--timeout",
                "1s",
                "--poll",
                "100ms",
                "--context",
                "T2",
                "--",
                "sh",
                "-c",
                "touch \"$TEST_DIR/T2.ran\"",
            ])
            .run();
        done.assert_code(75);
        assert!(
            !ctx.exists("T2.ran"),
            "a timed-out run never runs its command"
        );

        let view = ctx.key_view(&key);
        assert_eq!(view.holder_contexts(), ["H"], "{}", view.raw);
        assert!(
            view.queue().is_empty(),
            "timed-out waiters left tickets behind: {}",
            view.raw
        );
        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
    });
}

/// A waiting `baton run` interrupted by SIGINT exits 130, by SIGTERM 143; its command never
/// runs, and its ticket leaves the queue (it does not block the key until its waiter lease ends).
#[test]
fn interrupted_waiters_exit_130_or_143_and_leave_the_queue() {
    for_each_store(|ctx| {
        let key = ctx.key("interrupt");
        let mut holder = ctx.spawn_gated("H", &key, &[]);
        ctx.wait_started("H");
        for (signal, code, name) in [(libc::SIGINT, 130, "I"), (libc::SIGTERM, 143, "T")] {
            let mut waiter = ctx
                .baton([
                    "run",
                    &key,
                    "--poll",
                    "100ms",
                    "--context",
                    name,
                    "--",
                    "sh",
                    "-c",
                    &marker(name),
                ])
                .name(name)
                .spawn();
            ctx.wait_queued(&key, name);
            send_signal(waiter.pid(), signal);
            waiter.wait(PROMPT).assert_code(code);
            assert!(!ctx.exists(&format!("{name}.ran")));
            let view = ctx.key_view(&key);
            assert!(
                view.queue().is_empty(),
                "the interrupted waiter's ticket is still queued: {}",
                view.raw
            );
        }
        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
    });
}

/// `baton run` renews while its command runs: a command that outlives the TTL several times
/// over keeps the key (no waiter gets in, the run exits 0, not 78). The TTL is 2 s: with 1 s a
/// renewal has 600 ms to land, and on a loaded 2-core runner moto's DynamoDB took longer.
#[test]
fn run_renews_its_lease_while_the_command_runs() {
    for_each_store(|ctx| {
        let key = ctx.key("renew");
        let mut holder = ctx.spawn_gated("H", &key, &["--ttl", "2s"]);
        ctx.wait_started("H");
        let mut waiter = spawn_marked_waiter(ctx, &key);
        ctx.wait_queued(&key, "W");
        let has_clock = ctx.store_has_clock();
        // lease_left_ms counts to the deadline plus the clock's uncertainty (when the store's
        // clock, as read, ends the lease), and the status process's reading may lag the
        // holder's by that much again (S3's whole-second `Date`).
        let uncertain_ms = ctx.clock_uncertain_ms();
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(7000) {
            let view = ctx.key_view(&key);
            assert_eq!(
                view.holder_contexts(),
                ["H"],
                "H keeps the key: {}",
                view.raw
            );
            match view.holders()[0].lease_left_ms() {
                Some(left_ms) => {
                    assert!(
                        left_ms <= 2000 + 2 * uncertain_ms,
                        "the lease is 2 s at a time: {}",
                        view.raw
                    )
                }
                None => assert!(!has_clock, "holders show lease_left_ms: {}", view.raw),
            }
            assert!(
                !ctx.exists("W.ran"),
                "the waiter got in while H's command ran"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
        waiter.wait(PROMPT).assert_code(0);
        assert!(ctx.written_fence("W") > ctx.written_fence("H"));
    });
}

/// A waiter that is stopped when its turn comes cannot claim the grant in its claim window: the
/// turn passes to the next waiter, and on SIGCONT the stalled waiter reports the lost turn (78)
/// without ever running its command.
#[test]
fn stalled_waiter_loses_its_turn_and_exits_78() {
    for_each_store(|ctx| {
        let key = ctx.key("stalled");
        let mut holder = ctx.spawn_gated("H", &key, &[]);
        ctx.wait_started("H");
        let spawn_waiter = |name: &str| {
            ctx.baton([
                "run",
                &key,
                "--poll",
                "100ms",
                "--context",
                name,
                "--",
                "sh",
                "-c",
                &marker(name),
            ])
            .name(name)
            .spawn()
        };
        let mut stalled = spawn_waiter("S");
        ctx.wait_queued(&key, "S");
        let mut next = spawn_waiter("X");
        ctx.wait_queued(&key, "X");

        send_signal(stalled.pid(), libc::SIGSTOP);
        let resumed = scopeguard_cont(stalled.pid());
        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
        wait_until(
            "the next waiter to get the stalled waiter's turn",
            Duration::from_secs(20),
            || ctx.exists("X.ran"),
        );
        next.wait(PROMPT).assert_code(0);

        drop(resumed); // SIGCONT
        stalled.wait(PROMPT).assert_code(78);
        assert!(
            !ctx.exists("S.ran"),
            "a stalled waiter ran after losing its turn"
        );
        let view = ctx.key_view(&key);
        assert!(
            view.holders().is_empty() && view.queue().is_empty(),
            "{}",
            view.raw
        );
    });
}
