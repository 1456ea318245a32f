//! `baton run --cancel-running` with real processes: a running `baton run` holding the key is
//! asked to stop, stops its command (SIGTERM; SIGKILL after the grace when it ignores it), exits
//! 76 and is recorded superseded, and only then does the newer run start, with a higher fence.
//! A holder started with `--keep` is not asked and finishes its work first.

use baton_testkit as common;

use std::time::Duration;

use common::{as_u64_lenient, for_each_store, with_fresh_sqlite, Ctx, PROMPT, RENEWING_TTL};

/// Spawns `baton run KEY --cancel-running --context NAME -- (log NAME start, fence)`.
fn spawn_canceller(ctx: &Ctx, name: &str, key: &str, extra: &[&str]) -> common::Proc {
    let script = format!(
        r#"echo "{name} start" >> "$TEST_DIR/log"; echo "$BATON_FENCE" > "$TEST_DIR/{name}.fence""#
    );
    let mut args = vec!["run", key, "--cancel-running", "--context", name];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    ctx.baton(args).name(name).spawn()
}

#[test]
fn a_running_holder_is_stopped_recorded_superseded_and_the_newer_run_follows() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        // Renewed every 2 s, so it hears the ask within about 2 s.
        let mut holder = ctx.spawn_gated("H", &key, &["--ttl", RENEWING_TTL]);
        ctx.wait_started("H");
        // N's ticket waits only until H is stopped (a renewal and a SIGTERM): on a loaded
        // machine that is over before a `status` call sees it, so nothing waits for it here.
        // H can only be asked to stop by a queued N, which is what the stderr check shows.
        let mut newer = spawn_canceller(ctx, "N", &key, &[]);

        let stopped = holder.wait(PROMPT);
        stopped.assert_code(76);
        assert!(
            stopped.stderr.contains("asked to stop by ticket")
                && stopped.stderr.contains("(N)")
                && stopped.stderr.contains("--cancel-running"),
            "the holder says who asked it to stop:\n{}",
            stopped.describe()
        );
        newer.wait(PROMPT).assert_code(0);
        assert_eq!(
            ctx.log(),
            ["H start", "N start"],
            "the command was stopped before its end, and the newer one ran after it"
        );
        assert!(ctx.written_fence("N") > ctx.written_fence("H"));

        let entries = ctx.history(&key);
        let of = |context: &str| {
            entries
                .iter()
                .find(|e| e["context"] == context)
                .unwrap_or_else(|| panic!("no entry of {context}: {entries:?}"))
        };
        assert_eq!(of("H")["outcome"], "superseded", "{entries:?}");
        let reason = of("H")["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("asked to stop by ticket"), "{reason}");
        assert_eq!(of("N")["outcome"], "succeeded");
        assert_eq!(
            as_u64_lenient(&of("H")["fence"]),
            Some(ctx.written_fence("H")),
            "the entry is the stopped turn's"
        );
    });
}

#[test]
fn a_holder_started_with_keep_is_not_asked_and_finishes_first() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        let mut holder = ctx.spawn_gated("K", &key, &["--ttl", RENEWING_TTL, "--keep"]);
        ctx.wait_started("K");
        let mut newer = spawn_canceller(ctx, "N", &key, &[]);
        ctx.wait_queued(&key, "N");
        // Several renewals pass: nobody asks a kept holder to stop.
        std::thread::sleep(Duration::from_millis(4_500));
        assert!(!holder.has_exited(), "the kept holder still runs");
        assert_eq!(ctx.log(), ["K start"]);
        ctx.open_gate("K");
        holder.wait(PROMPT).assert_code(0);
        newer.wait(PROMPT).assert_code(0);
        assert_eq!(ctx.log(), ["K start", "K end", "N start"]);
        let entries = ctx.history(&key);
        assert!(
            entries
                .iter()
                .any(|e| e["context"] == "K" && e["outcome"] == "succeeded"),
            "{entries:?}"
        );
    });
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("deploy");
        let script = r#"trap "" TERM
echo "S start" >> "$TEST_DIR/log"
echo $$ > "$TEST_DIR/S.pid"
while :; do sleep 0.1; done"#;
        let mut stubborn = ctx
            .baton([
                "run",
                &key,
                "--ttl",
                "3s",
                "--context",
                "S",
                "--",
                "sh",
                "-c",
                script,
            ])
            .name("S")
            .spawn();
        ctx.wait_started("S");
        let mut newer = spawn_canceller(ctx, "N", &key, &[]);
        ctx.wait_queued(&key, "N");
        // Until its command is gone, status shows the holder on its way out, and who asked.
        let view = ctx.wait_status("the holder to be asked", &key, PROMPT, |view| {
            view.holders()
                .first()
                .is_some_and(|t| t.raw["stop_asked"].is_string())
        });
        let asked = view.holders()[0].raw["stop_asked"].to_string();
        assert!(asked.contains("(N)"), "{asked}");
        let table = ctx.baton(["status", &ctx.prefix]).run();
        table.assert_code(0);
        assert!(
            table
                .stdout
                .lines()
                .any(|line| line.contains("stopping") && line.contains('S')),
            "{}",
            table.stdout
        );
        let stopped = stubborn.wait(PROMPT);
        stopped.assert_code(76);
        assert!(
            stopped.elapsed >= Duration::from_secs(10),
            "SIGKILL only after the 10 s grace: {:?}",
            stopped.elapsed
        );
        assert!(
            !common::pid_alive(ctx.wait_pid("S.pid", PROMPT)),
            "the command is gone"
        );
        newer.wait(PROMPT).assert_code(0);
        assert_eq!(ctx.log(), ["S start", "N start"]);
    });
}

#[test]
fn a_job_submitted_with_cancel_running_stops_the_running_holder() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        let mut holder = ctx.spawn_gated("H", &key, &["--ttl", RENEWING_TTL]);
        ctx.wait_started("H");
        let submitted = ctx
            .baton(["submit", &key, "--cancel-running", "--context", "J"])
            .run();
        submitted.assert_code(0);
        let stopped = holder.wait(PROMPT);
        stopped.assert_code(76);
        assert!(stopped.stderr.contains("(J)"), "{}", stopped.describe());
        // The job waits for a worker; the key is free of the stopped holder.
        let view = ctx.wait_status("the holder to leave", &key, PROMPT, |view| {
            view.holders().is_empty()
        });
        assert_eq!(view.queue_contexts(), ["J"], "{}", view.raw);
    });
}

#[test]
fn a_job_running_under_a_worker_is_stopped_and_ends_superseded() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        let submitted = ctx
            .baton(["submit", &key, "--id", "j1", "--context", "J"])
            .run();
        submitted.assert_code(0);
        let script = r#"echo "job start" >> "$TEST_DIR/log"; echo $$ > "$TEST_DIR/J.pid"; while :; do sleep 0.05; done"#;
        let mut worker = ctx
            .baton([
                "worker",
                "--poll",
                "100ms",
                "--ttl",
                RENEWING_TTL,
                &key,
                "--",
                "sh",
                "-c",
                script,
            ])
            .name("worker")
            .spawn();
        let job_pid = ctx.wait_pid("J.pid", PROMPT);
        ctx.kill_group_on_drop(job_pid);
        let mut newer = spawn_canceller(ctx, "N", &key, &[]);
        // The job ends superseded (its `baton wait` says 76), and the newer run follows.
        ctx.baton(["wait", &key, "j1"])
            .run_within(PROMPT)
            .assert_code(76);
        newer.wait(PROMPT).assert_code(0);
        assert_eq!(ctx.log(), ["job start", "N start"]);
        assert!(!common::pid_alive(job_pid), "the job's command was stopped");
        common::send_signal(worker.pid(), libc::SIGTERM);
        worker.wait(PROMPT).assert_code(0);
        let entries = ctx.history(&key);
        assert!(
            entries.iter().any(|e| e["id"] == "j1"
                && e["outcome"] == "superseded"
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("asked to stop by ticket"))),
            "{entries:?}"
        );
    });
}
