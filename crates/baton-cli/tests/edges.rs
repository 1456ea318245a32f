//! Small edges a newcomer met in a first hour with baton, each kept fixed by a test: a retried
//! job listed twice, an empty token, an unknown job, shapeless keys, `memory:` from the command
//! line, a context without `$USER`, a waiting line that never waited, URLs in `notify ls`.

use baton_testkit as common;

use std::time::Duration;

use common::{for_each_store, with_fresh_sqlite, Ctx};
use serde_json::Value;

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// The rows of `jobs KEY -s all --json` for job `id` of KEY (a shared store holds other
/// tests' jobs too).
fn rows_of(ctx: &Ctx, key: &str, id: &str) -> Vec<Value> {
    let listed = ctx.baton(["jobs", key, "-s", "all", "--json"]).run();
    listed.assert_code(0);
    json_lines(&listed.stdout)
        .into_iter()
        .filter(|row| row["key"] == key && row["id"] == id)
        .collect()
}

/// Runs the jobs of `key` with a command that always fails until job `id` is dead.
fn run_until_dead(ctx: &Ctx, key: &str, id: &str) {
    let mut worker = ctx
        .baton(["worker", "--poll", "100ms", key, "--", "false"])
        .name("worker")
        .spawn();
    let waited = ctx
        .baton(["wait", key, id])
        .run_within(Duration::from_secs(60));
    waited.assert_code(1);
    worker.kill();
}

#[test]
fn a_retried_job_is_listed_once_with_its_attempts() {
    for_each_store(|ctx| {
        let key = ctx.key("jobs");
        ctx.baton(["submit", &key, "--id", "j1", "--max-attempts", "1"])
            .run()
            .assert_code(0);
        run_until_dead(ctx, &key, "j1");
        ctx.baton(["retry", &key, "j1"]).run().assert_code(0);
        let rows = rows_of(ctx, &key, "j1");
        assert_eq!(rows.len(), 1, "one row for a queued retried job: {rows:?}");
        assert_eq!(rows[0]["state"], "queued", "{rows:?}");
        run_until_dead(ctx, &key, "j1");
        let rows = rows_of(ctx, &key, "j1");
        assert_eq!(rows.len(), 1, "one row for a job dead twice: {rows:?}");
        assert_eq!(rows[0]["state"], "dead", "{rows:?}");
    });
}

#[test]
fn an_empty_token_is_a_usage_error() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("k");
        for command in ["release", "renew"] {
            let done = ctx.baton([command, &key, ""]).run();
            done.assert_code(2);
            assert!(done.stderr.contains("token"), "{}", done.describe());
        }
        // A token that is not empty but unknown stays an error of the store's answer.
        ctx.baton(["release", &key, "0123456789abcdef0123456789abcdef"])
            .run()
            .assert_code(1);
    });
}

#[test]
fn waiting_for_an_unknown_job_says_there_is_no_such_job() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("jobs");
        ctx.baton(["submit", &key, "--id", "j1"])
            .run()
            .assert_code(0);
        let done = ctx.baton(["wait", &key, "nojob"]).run();
        done.assert_code(1);
        assert!(
            done.stderr.contains("no job nojob"),
            "say there is no such job: {}",
            done.describe()
        );
    });
}

#[test]
fn keys_of_only_spaces_or_slashes_are_refused() {
    with_fresh_sqlite(|ctx| {
        for key in [" ", "/", "//x//", "a//b", "/x"] {
            let done = ctx.baton(["run", key, "--", "true"]).run();
            done.assert_code(2);
            assert!(
                done.stderr.contains("deploy/production"),
                "say what a key looks like: {}",
                done.describe()
            );
        }
        // A prefix ending in `/` is still a prefix where one is asked for.
        let paused = format!("{}p/", ctx.prefix);
        ctx.baton(["pause", &paused, "--reason", "test"])
            .run()
            .assert_code(0);
    });
}

#[test]
fn memory_from_the_command_line_warns_that_it_excludes_nothing() {
    with_fresh_sqlite(|ctx| {
        let done = ctx.baton(["--store", "memory:", "status"]).run();
        done.assert_code(0);
        assert!(
            done.stderr.contains("excludes nothing across processes"),
            "{}",
            done.describe()
        );
        let quiet = ctx.baton(["status"]).run();
        assert!(!quiet.stderr.contains("memory:"), "{}", quiet.describe());
    });
}

#[test]
fn the_default_context_names_the_account_without_user_variables() {
    with_fresh_sqlite(|ctx| {
        let account = std::process::Command::new("id")
            .arg("-un")
            .output()
            .expect("run id -un");
        let account = String::from_utf8_lossy(&account.stdout).trim().to_owned();
        let key = ctx.key("k");
        ctx.baton(["acquire", "--ttl", "1m", &key])
            .env("USER", "")
            .env("LOGNAME", "")
            .run()
            .assert_code(0);
        let view = ctx.key_view(&key);
        let context = view.holder_contexts().join(" ");
        assert!(
            context.starts_with(&format!("{account}@")),
            "the context names {account}: {context}"
        );
    });
}

#[test]
fn a_timeout_of_zero_prints_no_waiting_line() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("k");
        ctx.baton(["acquire", "--ttl", "1m", &key])
            .run()
            .assert_code(0);
        for args in [
            vec!["acquire", "--ttl", "1m", "--timeout", "0", key.as_str()],
            vec!["run", "--timeout", "0", key.as_str(), "--", "true"],
        ] {
            let done = ctx.baton(&args).run();
            done.assert_code(75);
            assert!(
                !done
                    .stderr
                    .lines()
                    .any(|l| l.starts_with("baton: waiting for")),
                "--timeout 0 does not wait: {}",
                done.describe()
            );
        }
    });
}

#[test]
fn notify_ls_shows_urls_up_to_their_first_segment() {
    with_fresh_sqlite(|ctx| {
        let rules = [
            (
                "slack",
                "https://hooks.slack.com/services/T000/B000/SECRETxyz",
            ),
            (
                "hook",
                "https://user:pw@example.com:8443/hook/abc?token=zzz",
            ),
        ];
        for (name, url) in rules {
            ctx.baton([
                "notify",
                "add",
                &ctx.prefix,
                "--name",
                name,
                "--url",
                url,
                "--on",
                "failed",
            ])
            .run()
            .assert_code(0);
        }
        for args in [vec!["notify", "ls"], vec!["notify", "ls", "--json"]] {
            let listed = ctx.baton(&args).run();
            listed.assert_code(0);
            let out = &listed.stdout;
            assert!(out.contains("https://hooks.slack.com/services/…"), "{out}");
            assert!(out.contains("https://example.com:8443/hook/…"), "{out}");
            for secret in ["SECRETxyz", "B000", "pw@", "user:", "zzz", "abc"] {
                assert!(!out.contains(secret), "{secret} shown: {out}");
            }
        }
    });
}

#[test]
fn an_unknown_rule_exits_with_a_listed_code() {
    with_fresh_sqlite(|ctx| {
        for command in ["rm", "test"] {
            let done = ctx.baton(["notify", command, "nope"]).run();
            done.assert_code(3);
            assert!(
                done.stderr.contains("no rule named nope"),
                "{}",
                done.describe()
            );
        }
        let help = ctx.baton(["--help"]).run();
        let table = help.stdout.split("Exit codes:").nth(1).unwrap_or_default();
        let three = table
            .lines()
            .skip_while(|line| !line.trim_start().starts_with("3 "))
            .take(2)
            .collect::<String>();
        assert!(
            three.contains("notify rm"),
            "exit 3 lists notify rm: {three}"
        );
    });
}

/// A `waited --after 2s` event is raised by the waiter itself when its ticket has waited 2 s,
/// not at its next regular refresh (20 s later with the default waiter lease). The bound here
/// is far from both: it tells the two apart without timing scheduler noise.
#[test]
fn a_waited_rule_fires_near_its_threshold() {
    for_each_store(|ctx| {
        let key = ctx.key("slow");
        ctx.baton([
            "notify",
            "add",
            &ctx.prefix,
            "--name",
            "slow",
            "--url",
            "http://127.0.0.1:9/x",
            "--on",
            "waited",
            "--after",
            "2s",
        ])
        .run()
        .assert_code(0);
        ctx.baton(["acquire", "--ttl", "5m", &key])
            .run()
            .assert_code(0);
        let _waiter = ctx
            .baton(["acquire", "--ttl", "1m", &key])
            .name("waiter")
            .spawn();
        let started = std::time::Instant::now();
        common::wait_until("the waited event", Duration::from_secs(60), || {
            let status = ctx.key_view(&key).raw;
            status["notifications"]["undelivered"].as_u64().unwrap_or(0) > 0
        });
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(12),
            "raised {took:?} after the wait began; the threshold was 2 s"
        );
    });
}

#[test]
fn a_command_found_nowhere_exits_127_naming_it() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("k");
        let done = ctx
            .baton(["run", &key, "--", "no-such-program-anywhere"])
            .run();
        done.assert_code(127);
        assert!(
            done.stderr.contains("cannot run no-such-program-anywhere"),
            "{}",
            done.describe()
        );
    });
}

/// CMD is looked up on `PATH` as a shell would: the first executable file of that name, a
/// file without the execute bit passed over, and the program gets its name as typed.
#[test]
fn a_command_is_the_first_executable_on_path_and_keeps_its_name() {
    use std::os::unix::fs::PermissionsExt;
    with_fresh_sqlite(|ctx| {
        let (first, second) = (ctx.path("first"), ctx.path("second"));
        for (dir, says, mode) in [(&first, "first", 0o644), (&second, "second", 0o755)] {
            std::fs::create_dir_all(dir).expect("make a PATH directory");
            let tool = dir.join("baton-test-tool");
            std::fs::write(&tool, format!("#!/bin/sh\necho {says}\n")).expect("write the tool");
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(mode))
                .expect("set the tool's mode");
        }
        let path = format!(
            "{}:{}:{}",
            first.display(),
            second.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let key = ctx.key("k");
        let ran = ctx
            .baton(["run", "-q", &key, "--", "baton-test-tool"])
            .env("PATH", &path)
            .run();
        ran.assert_code(0);
        assert_eq!(ran.stdout.trim(), "second", "{}", ran.describe());
        let named = ctx
            .baton(["run", "-q", &key, "--", "sh", "-c", "echo $0"])
            .run();
        named.assert_code(0);
        assert_eq!(named.stdout.trim(), "sh", "{}", named.describe());
    });
}

/// Each `baton run` is a process of its own that opens the store alone and reads its whole
/// WAL: the CLI keeps the WAL short for the next one (checkpointed at 128 pages, not SQLite's
/// 1,000), and leaves it in place at exit rather than checkpoint it with three `fsync`s.
#[test]
fn one_command_processes_keep_the_sqlite_wal_short() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("k");
        for _ in 0..80 {
            ctx.baton(["run", "-q", &key, "--", "true"])
                .run()
                .assert_code(0);
        }
        let wal = ctx.path("baton.db-wal");
        let len = std::fs::metadata(&wal)
            .unwrap_or_else(|e| panic!("the WAL {} outlives the runs: {e}", wal.display()))
            .len();
        // 80 turns write a few pages each, hundreds in all; a frame is 4 KiB and 24 bytes.
        assert!(len <= 160 * (4096 + 24), "the WAL grew to {len} bytes");
    });
}
