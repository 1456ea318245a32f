//! Every command, into a stdout whose reader has gone (`baton … | head`): no panic, and the exit
//! code it would have had. The cases cover every command `--help` lists, and every command whose
//! help offers `--json` is run with it: a command added without a case fails
//! [`every_command_and_output_flag_has_a_case`].

use baton_testkit as common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::help::{command_paths, help_of};
use common::{with_fresh_sqlite, Ctx, Done, PROMPT};

/// One run of baton into a closed pipe: the command path it covers (`kv ls`), its arguments
/// and the exit code it must end with.
struct Case {
    args: Vec<String>,
    code: i32,
}

fn case(args: &[&str], code: i32) -> Case {
    Case {
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        code,
    }
}

/// Whether a command's help offers `--json` as an option.
fn offers_json(path: &str) -> bool {
    let args: Vec<&str> = path.split(' ').collect();
    help_of(&args)
        .lines()
        .any(|line| line.trim_start().starts_with("--json"))
}

/// The command path a case covers: its leading words that name commands.
fn path_of(args: &[String], paths: &BTreeSet<String>) -> Option<String> {
    let two = args.iter().take(2).cloned().collect::<Vec<_>>().join(" ");
    let one = args.first().cloned().unwrap_or_default();
    [two, one].into_iter().find(|p| paths.contains(p))
}

/// The cases, on a store where each has something to print.
fn cases(ctx: &Ctx) -> Vec<Case> {
    let lock = ctx.key("lock");
    let jobs = ctx.key("jobs/a");
    let value = ctx.key("value");
    let turn = ctx
        .baton(["acquire", "--ttl", "1h", "--json", &ctx.key("held")])
        .run();
    turn.assert_code(0);
    let turn: serde_json::Value = serde_json::from_str(&turn.stdout).expect("acquire's JSON");
    let token = turn["token"].as_str().expect("a token").to_owned();
    let fence = turn["fence"].to_string();
    let held = ctx.key("held");
    let paused = ctx.key("paused/");
    let url = "http://127.0.0.1:9/hooks/x";
    let tokens = ctx.path("tokens.json").display().to_string();
    ctx.baton(["tokens", "new", "a", "--scope", "read:", "--file", &tokens])
        .run()
        .assert_code(0);
    vec![
        case(&["run", &lock, "--", "true"], 0),
        case(&["once", &ctx.key("once"), "--", "true"], 0),
        case(&["status"], 0),
        case(&["status", "--json"], 0),
        case(&["log", &lock], 0),
        case(&["log", &lock, "--json"], 0),
        case(&["check", &held, "--fence", &fence, "--json"], 0),
        case(&["renew", &held, &token], 0),
        case(&["pause", &paused, "--reason", "test"], 0),
        case(
            &["pause", &ctx.key("paused2/"), "--reason", "test", "--json"],
            0,
        ),
        case(&["pause", "--list"], 0),
        case(&["pause", "--list", "--json"], 0),
        case(&["resume", &paused], 0),
        case(&["resume", &ctx.key("paused2/"), "--json"], 0),
        case(&["reap", &ctx.key("")], 0),
        case(&["reap", &ctx.key(""), "--json"], 0),
        case(&["cancel", "--queued", &held], 0),
        case(&["release", &held, &token], 0),
        case(&["init"], 0),
        case(&["init", "--json"], 0),
        case(&["submit", &jobs, "--id", "j2"], 0),
        case(&["submit", &jobs, "--id", "j3", "--json"], 0),
        case(&["jobs"], 0),
        case(&["jobs", "--json"], 0),
        case(&["jobs", "-s", "all"], 0),
        case(&["jobs", "show", &jobs, "j1"], 0),
        case(&["jobs", "show", &jobs, "j1", "--json"], 0),
        case(&["wait", &jobs, "j1"], 0),
        case(&["why", &jobs, "j2"], 0),
        case(&["retry", &jobs, "j1"], 1),
        case(
            &["complete", &jobs, "j2", "--job-token", "not-its-token"],
            1,
        ),
        case(&["kv", "set", &value, "1"], 0),
        case(&["kv", "set", &value, "{}", "--json"], 0),
        case(&["kv", "get", &value], 0),
        case(&["kv", "get", &value, "--json"], 0),
        case(&["kv", "ls"], 0),
        case(&["kv", "ls", "--json"], 0),
        case(&["kv", "del", &value], 0),
        case(
            &[
                "notify",
                "add",
                &ctx.prefix,
                "--name",
                "notes",
                "--url",
                url,
                "--on",
                "failed",
            ],
            0,
        ),
        case(&["notify", "ls"], 0),
        case(&["notify", "ls", "--json"], 0),
        case(&["notify", "test", "notes"], 1),
        case(&["notify", "deliver"], 0),
        case(&["notify", "rm", "notes"], 0),
        case(&["tokens", "new", "ci", "--scope", "read:"], 0),
        case(&["tokens", "new", "ci", "--scope", "read:", "--json"], 0),
        case(&["tokens", "ls", "--file", &tokens], 0),
        case(&["tokens", "ls", "--file", &tokens, "--json"], 0),
        case(&["tokens", "revoke", "a", "--file", &tokens], 0),
        case(&["completions", "bash"], 0),
        case(&["man"], 0),
        case(&["man", "run"], 0),
    ]
}

/// A job `j1` on KEY that has run (its output tail is `hello`), through a worker whose own
/// stdout has no reader: the worker goes on, and keeps the tail.
fn job_run_by_a_worker_without_reader(ctx: &Ctx, key: &str) {
    ctx.baton(["submit", key, "--id", "j1"])
        .run()
        .assert_code(0);
    let mut worker = ctx
        .baton([
            "worker",
            "--poll",
            "100ms",
            key,
            "--",
            "sh",
            "-c",
            "echo hello",
        ])
        .name("worker")
        .stdout_closed()
        .spawn();
    let waited = ctx
        .baton(["wait", key, "j1"])
        .run_within(Duration::from_secs(60));
    waited.assert_code(0);
    assert_eq!(waited.stdout.trim(), "hello", "{}", waited.describe());
    assert!(!worker.has_exited(), "the worker stopped with its reader");
    worker.kill();
    assert!(!worker.stderr().contains("panicked"), "{}", worker.stderr());
}

#[test]
fn every_command_ends_as_it_would_when_its_reader_has_gone() {
    with_fresh_sqlite(|ctx| {
        job_run_by_a_worker_without_reader(ctx, &ctx.key("jobs/a"));
        for case in cases(ctx) {
            let done = ctx.baton(&case.args).stdout_closed().run();
            done.assert_no_panic();
            assert_eq!(done.code, Some(case.code), "{}", done.describe());
        }
    });
}

/// `acquire` into a closed pipe: nobody will see the token, so the turn is given back and the
/// key is free again.
#[test]
fn acquire_without_a_reader_gives_its_turn_back() {
    with_fresh_sqlite(|ctx| {
        for json in [false, true] {
            let key = ctx.key(if json { "json" } else { "plain" });
            let mut args = vec!["acquire", "--ttl", "1h", key.as_str()];
            if json {
                args.push("--json");
            }
            let done = ctx.baton(&args).stdout_closed().run();
            done.assert_no_panic();
            assert_eq!(done.code, Some(1), "{}", done.describe());
            assert!(
                done.stderr.contains("given back"),
                "say the turn was given back: {}",
                done.describe()
            );
            let after = ctx
                .baton(["acquire", "--ttl", "1m", "--timeout", "0", &key])
                .run();
            after.assert_code(0);
        }
    });
}

/// `serve` writes nothing to stdout; it starts, serves and stops with no reader too.
#[test]
fn serve_without_a_reader_serves() {
    with_fresh_sqlite(|ctx| {
        let mut server = ctx
            .baton(["serve", "--listen", "127.0.0.1:0"])
            .name("serve")
            .stdout_closed()
            .spawn();
        common::wait_until("the server says where it serves", PROMPT, || {
            server.stderr().contains("serving")
        });
        common::send_signal(server.pid(), libc::SIGTERM);
        let done: Done = server.wait(PROMPT);
        done.assert_no_panic();
        assert_eq!(done.code, Some(0), "{}", done.describe());
    });
}

#[test]
fn every_command_and_output_flag_has_a_case() {
    with_fresh_sqlite(|ctx| {
        let paths: BTreeSet<String> = command_paths().into_iter().collect();
        assert!(paths.len() > 20, "too few commands found: {paths:?}");
        let cases = cases(ctx);
        // `worker`, `acquire` and `serve` have tests of their own above.
        let mut covered: BTreeSet<String> = ["worker", "acquire", "serve"]
            .map(str::to_owned)
            .into_iter()
            .collect();
        let mut with_json = BTreeSet::new();
        for case in &cases {
            let path = path_of(&case.args, &paths)
                .unwrap_or_else(|| panic!("{:?} names no listed command", case.args));
            if case.args.iter().any(|a| a == "--json") {
                with_json.insert(path.clone());
            }
            covered.insert(path);
        }
        with_json.insert("acquire".to_owned());
        for path in &paths {
            assert!(
                covered.contains(path),
                "no closed-pipe case runs `baton {path}`"
            );
            if offers_json(path) {
                assert!(
                    with_json.contains(path),
                    "no closed-pipe case runs `baton {path} --json`"
                );
            }
        }
    });
}

/// `tokens new --file` with no reader for the token: nobody could use it, so it is not added.
#[test]
fn a_token_nobody_saw_is_not_added_to_the_file() {
    with_fresh_sqlite(|ctx| {
        let tokens = ctx.path("tokens.json").display().to_string();
        ctx.baton([
            "tokens", "new", "seen", "--scope", "read:", "--file", &tokens,
        ])
        .run()
        .assert_code(0);
        for json in [false, true] {
            let mut args = vec![
                "tokens", "new", "unseen", "--scope", "read:", "--file", &tokens,
            ];
            if json {
                args.push("--json");
            }
            let done = ctx.baton(&args).stdout_closed().run();
            done.assert_no_panic();
            assert_eq!(done.code, Some(1), "{}", done.describe());
            assert!(
                done.stderr.contains("nothing was added"),
                "{}",
                done.describe()
            );
        }
        let listed = ctx.baton(["tokens", "ls", "--file", &tokens]).run();
        listed.assert_code(0);
        assert!(listed.stdout.contains("seen"), "{}", listed.describe());
        assert!(!listed.stdout.contains("unseen"), "{}", listed.describe());
    });
}
