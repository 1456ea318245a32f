//! Bad input gives a clear message, a documented exit code, no panic, and changes nothing:
//! malformed keys, oversize contexts, usage errors, and corrupt documents in the store.

use baton_testkit as common;

use common::{for_each_store, with_fresh_sqlite, Ctx};

/// Status lists no key under the test's prefix.
fn assert_prefix_untouched(ctx: &Ctx) {
    let status = ctx.status();
    let keys = status
        .get("keys")
        .and_then(|keys| keys.as_array())
        .cloned()
        .unwrap_or_default();
    assert!(
        keys.is_empty(),
        "refused input left something behind: {status}"
    );
}

#[test]
fn malformed_keys_are_refused() {
    for_each_store(|ctx| {
        let too_long = format!("{}{}", ctx.prefix, "k".repeat(257 - ctx.prefix.len()));
        assert_eq!(too_long.len(), 257);
        let bad_keys = [
            ("empty", String::new()),
            ("control char", ctx.key("a\u{1}b")),
            ("newline", ctx.key("line\nbreak")),
            ("257 bytes", too_long),
        ];
        for (what, key) in &bad_keys {
            let done = ctx.baton(["acquire", key, "--timeout", "0"]).run();
            done.assert_refused(&[1, 2]);
            assert!(done.stdout.trim().is_empty(), "{what}: {}", done.describe());

            let marker = format!("{}.ran", what.replace(' ', "_"));
            let done = ctx
                .baton([
                    "run",
                    key,
                    "--",
                    "sh",
                    "-c",
                    &format!("touch \"$TEST_DIR/{marker}\""),
                ])
                .run();
            done.assert_refused(&[1, 2]);
            assert!(
                !ctx.exists(&marker),
                "{what}: the command ran under a refused key"
            );
            ctx.baton(["release", key, "0123456789abcdef"])
                .run()
                .assert_refused(&[1, 2]);
        }
        assert_prefix_untouched(ctx);

        // The edge itself: 256 bytes is a key.
        let longest = format!("{}{}", ctx.prefix, "k".repeat(256 - ctx.prefix.len()));
        let done = ctx.baton(["acquire", &longest, "--timeout", "0"]).run();
        done.assert_code(0);
        ctx.baton(["release", &longest, done.stdout.trim()])
            .run()
            .assert_code(0);
    });
}

#[test]
fn oversize_context_is_refused() {
    for_each_store(|ctx| {
        let key = ctx.key("context");
        let done = ctx
            .baton([
                "acquire",
                &key,
                "--timeout",
                "0",
                "--context",
                &"c".repeat(1025),
            ])
            .run();
        done.assert_refused(&[1, 2]);
        let done = ctx
            .baton([
                "run",
                &key,
                "--context",
                &"c".repeat(1025),
                "--",
                "sh",
                "-c",
                "touch \"$TEST_DIR/ran\"",
            ])
            .run();
        done.assert_refused(&[1, 2]);
        assert!(!ctx.exists("ran"));
        assert_prefix_untouched(ctx);

        let full = "c".repeat(1024);
        let done = ctx
            .baton(["acquire", &key, "--timeout", "0", "--context", &full])
            .run();
        done.assert_code(0);
        assert_eq!(ctx.key_view(&key).holder_contexts(), [full]);
        ctx.baton(["release", &key, done.stdout.trim()])
            .run()
            .assert_code(0);
    });
}

#[test]
fn usage_errors_exit_2() {
    for_each_store(|ctx| {
        let key = ctx.key("usage");
        let usage_errors: [&[&str]; 7] = [
            &[],
            &["frobnicate"],
            &["run", &key],
            &["acquire", &key, "--timeout", "soon"],
            &["acquire", &key, "--ttl", "5 parsecs"],
            &["release", &key],
            &["release", &key, "0123456789abcdef", "--outcome", "bogus"],
        ];
        for args in usage_errors {
            ctx.baton(args).run().assert_refused(&[2]);
        }
        // Below the TTL minimum of 1 s.
        ctx.baton(["acquire", &key, "--ttl", "500ms", "--timeout", "0"])
            .run()
            .assert_refused(&[1, 2]);
        assert_prefix_untouched(ctx);
    });
}

#[test]
fn conflicting_limit_and_unknown_ticket_are_refused() {
    for_each_store(|ctx| {
        let key = ctx.key("limits");
        let done = ctx.baton(["acquire", &key, "--timeout", "0"]).run();
        done.assert_code(0);
        let token = done.stdout.trim().to_owned();
        ctx.baton(["acquire", &key, "--timeout", "0", "--limit", "2"])
            .run()
            .assert_refused(&[1]);
        ctx.baton(["cancel", &key, "no-such-ticket"])
            .run()
            .assert_refused(&[1]);
        assert_eq!(ctx.key_view(&key).holders().len(), 1);
        ctx.baton(["release", &key, &token]).run().assert_code(0);
    });
}

/// Garbage in a key's document: every command that touches the key refuses with a message
/// that says the document is corrupt, and the row is left as it was.
#[test]
fn corrupt_sqlite_document_is_refused() {
    with_fresh_sqlite(|ctx| {
        // Create the store file and its schema.
        let other = ctx.key("healthy");
        let done = ctx.baton(["acquire", &other, "--timeout", "0"]).run();
        done.assert_code(0);
        ctx.baton(["release", &other, done.stdout.trim()])
            .run()
            .assert_code(0);

        let db_path = ctx
            .store
            .strip_prefix("sqlite:")
            .expect("a sqlite store URL")
            .to_owned();
        let connection = rusqlite::Connection::open(&db_path).expect("open the store file");
        connection
            .busy_timeout(std::time::Duration::from_secs(10))
            .expect("busy timeout");
        let garbage_key = ctx.key("garbage");
        let garbage: &[u8] = b"\x00\xffthis is not a baton document{";
        let newer_key = ctx.key("newer");
        let newer: &[u8] = br#"{"format": 4000000000, "tickets": []}"#;
        for (key, doc) in [(&garbage_key, garbage), (&newer_key, newer)] {
            connection
                .execute(
                    "INSERT INTO baton_docs (key, version, doc) VALUES (?1, 7, ?2)",
                    (key.as_str(), doc),
                )
                .expect("write a corrupt document");
        }

        for (key, doc) in [(&garbage_key, garbage), (&newer_key, newer)] {
            let done = ctx.baton(["acquire", key, "--timeout", "0"]).run();
            done.assert_refused(&[1]);
            if key == &garbage_key {
                assert!(
                    done.stderr.to_lowercase().contains("corrupt"),
                    "the message says the document is corrupt:\n{}",
                    done.describe()
                );
            }
            let done = ctx
                .baton(["run", key, "--", "sh", "-c", "touch \"$TEST_DIR/ran\""])
                .run();
            done.assert_refused(&[1]);
            assert!(!ctx.exists("ran"), "the command ran on a corrupt key");
            ctx.baton(["release", key, "0123456789abcdef0123456789abcdef"])
                .run()
                .assert_refused(&[1]);
            // Status may refuse or report the key; it never panics.
            ctx.baton(["status", &ctx.prefix, "--json"])
                .run()
                .assert_no_panic();

            let (version, stored): (i64, Vec<u8>) = connection
                .query_row(
                    "SELECT version, doc FROM baton_docs WHERE key = ?1",
                    [key.as_str()],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .expect("the row is still there");
            assert_eq!(
                (version, stored.as_slice()),
                (7, doc),
                "refusals change nothing"
            );
        }

        // Other keys still work.
        let done = ctx.baton(["acquire", &other, "--timeout", "0"]).run();
        done.assert_code(0);
        ctx.baton(["release", &other, done.stdout.trim()])
            .run()
            .assert_code(0);
    });
}

/// Stored text (a context, a reason, who paused, a job's error) with terminal escapes: an OSC
/// that retitles the terminal and a CSI that clears it.
const ESCAPES: &str = "evil\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}2J text";

/// Fails the test if `done`'s output carries a control character a terminal would act on
/// (newlines and the waiting line's own tab-free text aside).
fn assert_no_escapes(what: &str, done: &common::Done) {
    for (stream, text) in [("stdout", &done.stdout), ("stderr", &done.stderr)] {
        let bad = text
            .chars()
            .find(|c| c.is_control() && *c != '\n' && *c != '\t');
        assert!(
            bad.is_none(),
            "{what}: {stream} carries the control character {bad:?}:\n{}",
            done.describe().escape_debug()
        );
    }
    assert_no_panic_or_overflow(done);
}

fn assert_no_panic_or_overflow(done: &common::Done) {
    done.assert_no_panic();
    assert_ne!(done.code, Some(101), "{}", done.describe());
}

/// Contexts, reasons and job errors are shown everywhere they reach a terminal with their
/// control characters replaced: the waiting line, status, log, check, kv, jobs, why, wait,
/// pause, a refusal and the message of a run asked to stop.
#[test]
fn terminal_escapes_in_stored_text_never_reach_the_output() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("escapes");
        // A holder whose context carries the escapes.
        let script = Ctx::gate_script("H");
        let mut holder = ctx
            .baton(["run", &key, "--context", ESCAPES, "--", "sh", "-c", &script])
            .name("H")
            .spawn();
        ctx.wait_started("H");

        // The waiting line names the holder and its context.
        let waiter = ctx
            .baton(["run", &key, "--timeout", "1500ms", "--", "true"])
            .run();
        waiter.assert_code(75);
        assert!(
            waiter.stderr.contains("pwned"),
            "the waiting line shows the context: {}",
            waiter.describe()
        );
        assert_no_escapes("the waiting line", &waiter);
        let prefix = ctx.prefix.clone();
        assert_no_escapes("status", &ctx.baton(["status", &prefix]).run());
        let fence = ctx.written_fence("H").to_string();
        let check = ctx
            .baton(["check", &key, "--fence", "1"])
            .env("BATON_FENCE", &fence)
            .run();
        assert_no_escapes("check of a fence that does not hold", &check);

        // A newer ticket with the escapes asks the holder to stop: its message names who asked.
        let asker = ctx
            .baton([
                "acquire",
                &key,
                "--cancel-running",
                "--timeout",
                "0",
                "--context",
                ESCAPES,
            ])
            .run();
        asker.assert_code(75);
        let stopped = holder.wait(common::PROMPT);
        assert_no_escapes("a run asked to stop", &stopped);
        assert_no_escapes("log", &ctx.baton(["log", &key]).run());

        // A paused key: its reason and who paused it, in pause, pause --list and a waiter.
        let paused_key = ctx.key("paused");
        let pause = ctx
            .baton(["pause", &paused_key, "--reason", ESCAPES, "--by", ESCAPES])
            .run();
        assert_no_escapes("pause", &pause);
        assert_no_escapes("pause --list", &ctx.baton(["pause", "--list"]).run());
        let frozen = ctx
            .baton(["run", &paused_key, "--timeout", "1s", "--", "true"])
            .run();
        assert_no_escapes("a waiter on a paused key", &frozen);
        assert_no_escapes("resume", &ctx.baton(["resume", &paused_key]).run());

        // kv: the writer's context.
        let name = ctx.key("value");
        ctx.baton(["kv", "set", &name, "v", "--context", ESCAPES])
            .run()
            .assert_code(0);
        assert_no_escapes("kv ls", &ctx.baton(["kv", "ls", &prefix]).run());

        // A job submitted with the escapes, then run and failed with them as its error.
        let job_key = ctx.key("job");
        let submit = ctx
            .baton([
                "submit",
                &job_key,
                "--id",
                "j1",
                "--max-attempts",
                "1",
                "--context",
                ESCAPES,
            ])
            .run();
        submit.assert_code(0);
        assert_no_escapes("jobs", &ctx.baton(["jobs", &job_key]).run());
        assert_no_escapes("why (queued)", &ctx.baton(["why", &job_key, "j1"]).run());
        let failing = format!(
            "printf '{}' >&2; exit 3",
            ESCAPES.replace('\u{1b}', "\\033")
        );
        let mut worker = ctx
            .baton([
                "worker", &job_key, "--poll", "100ms", "--", "sh", "-c", &failing,
            ])
            .name("worker")
            .spawn();
        let waited = ctx.baton(["wait", &job_key, "j1"]).run();
        worker.kill();
        assert_no_panic_or_overflow(&waited);
        for (what, done) in [
            (
                "jobs show",
                ctx.baton(["jobs", "show", &job_key, "j1"]).run(),
            ),
            ("why (ended)", ctx.baton(["why", &job_key, "j1"]).run()),
            (
                "jobs (ended)",
                ctx.baton(["jobs", &job_key, "-s", "all"]).run(),
            ),
        ] {
            assert_no_escapes(what, &done);
        }
        let _ = holder;
    });
}

/// Durations too long for their flag are refused where they are parsed (exit 2, naming the
/// flag and the largest value allowed), and the largest allowed ones work: no panic on an
/// `Instant` overflow (exit 101) and no TTL wrapped into a short one.
#[test]
fn huge_durations_are_refused_by_name_and_the_largest_ones_work() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("huge");
        let name = ctx.key("value");
        let huge = "500000000000y";
        let refused: Vec<(&str, Vec<&str>)> = vec![
            (
                "--timeout",
                vec!["run", &key, "--timeout", huge, "--", "true"],
            ),
            (
                "--max-hold",
                vec!["run", &key, "--max-hold", huge, "--", "true"],
            ),
            ("--ttl", vec!["run", &key, "--ttl", "8d", "--", "true"]),
            (
                "--store-retry",
                vec!["acquire", &key, "--store-retry", huge],
            ),
            (
                "--until",
                vec!["pause", &key, "--reason", "r", "--until", huge],
            ),
            (
                "--from",
                vec!["pause", &key, "--reason", "r", "--from", "101y"],
            ),
            ("--ttl", vec!["kv", "set", &name, "v", "--ttl", huge]),
            ("--not-before", vec!["submit", &key, "--not-before", huge]),
            ("--max-run", vec!["submit", &key, "--max-run", huge]),
            (
                "--retain",
                vec!["once", &key, "--retain", huge, "--", "true"],
            ),
            (
                "--min-left",
                vec!["check", &key, "--fence", "1", "--min-left", huge],
            ),
            (
                "--grace",
                vec!["worker", &key, "--grace", huge, "--", "true"],
            ),
        ];
        for (flag, args) in &refused {
            let done = ctx.baton(args).run();
            done.assert_code(2);
            assert!(
                done.stderr.contains(flag) && done.stderr.contains("largest value allowed"),
                "{args:?}: names {flag} and its bound:\n{}",
                done.describe()
            );
        }
        assert_prefix_untouched(ctx);

        // The largest values: the run starts, holds and ends as usual.
        ctx.baton([
            "run",
            &key,
            "--timeout",
            "100y",
            "--max-hold",
            "100y",
            "--",
            "true",
        ])
        .run()
        .assert_code(0);
        ctx.baton([
            "once",
            &key,
            "--retain",
            "3650d",
            "--max-hold",
            "100y",
            "--",
            "true",
        ])
        .run()
        .assert_code(0);
        ctx.baton(["pause", &key, "--reason", "r", "--until", "100y"])
            .run()
            .assert_code(0);
        ctx.baton(["resume", &key]).run().assert_code(0);
        ctx.baton(["kv", "set", &name, "v", "--ttl", "100y"])
            .run()
            .assert_code(0);
        let listed = ctx.baton(["kv", "ls", &ctx.prefix]).run();
        listed.assert_code(0);
        assert!(
            listed.stdout.contains("in 3652") && listed.stdout.contains(&name),
            "expires in 100 years, not a wrapped time:\n{}",
            listed.describe()
        );
        let value = ctx.baton(["kv", "get", &name]).run();
        value.assert_code(0);
        assert_eq!(value.stdout.trim(), "v");
    });
}
