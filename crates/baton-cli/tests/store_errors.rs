//! What a newcomer meets when the store is wrong: an error that cannot heal (a file that is not
//! a database, a read-only file, a directory that cannot be made, a bad URL) fails at once,
//! naming the cause, however long `--store-retry` is; one that may heal (a refused port) is
//! retried. A command that only reads never creates a store: a mistyped path is an error, and
//! the per-user default store, before anything wrote to it, reads as empty.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use baton_testkit as common;

use std::time::Duration;

use common::files::ReadOnlyFile;
use common::{with_fresh_sqlite, Ctx, Done};

/// Far below the 60 s `--store-retry` the commands are given, far above any scheduling delay.
const AT_ONCE: Duration = Duration::from_secs(20);

/// The commands that wait for a turn, which retry a store that cannot be reached.
fn waiting_commands(ctx: &Ctx, store: &str) -> Vec<Done> {
    let key = ctx.key("k");
    let store_arg = format!("--store={store}");
    [
        vec!["acquire", &key, &store_arg, "--store-retry", "60s"],
        vec![
            "run",
            &key,
            &store_arg,
            "--store-retry",
            "60s",
            "--",
            "true",
        ],
    ]
    .into_iter()
    .map(|args| ctx.baton(args).run_within(Duration::from_secs(90)))
    .collect()
}

/// Each command failed with `code` within [`AT_ONCE`], without offering to retry, naming the
/// cause in baton's own words.
fn failed_at_once(done: &[Done], code: i32, cause: &str) {
    for done in done {
        done.assert_code(code);
        assert!(done.elapsed < AT_ONCE, "not at once:\n{}", done.describe());
        assert!(
            !done.stderr.contains("retrying"),
            "an error that cannot heal must not be retried:\n{}",
            done.describe()
        );
        assert!(
            done.stderr.starts_with("baton: ") && done.stderr.contains(cause),
            "the message should name `{cause}`:\n{}",
            done.describe()
        );
    }
}

#[test]
fn a_file_that_is_not_a_database_fails_at_once() {
    with_fresh_sqlite(|ctx| {
        let path = ctx.path("notes.db");
        std::fs::write(&path, "a shopping list\n".repeat(100)).unwrap();
        let store = format!("sqlite:{}", path.display());
        failed_at_once(
            &waiting_commands(ctx, &store),
            1,
            "is not a SQLite database",
        );
    });
}

#[test]
fn a_read_only_store_file_fails_at_once() {
    with_fresh_sqlite(|ctx| {
        let path = ctx.path("read-only.db");
        let store = format!("sqlite:{}", path.display());
        ctx.baton(["init", "--store", &store]).run().assert_code(0);
        let _read_only = ReadOnlyFile::new(&path);
        failed_at_once(&waiting_commands(ctx, &store), 1, "is read-only");
    });
}

#[test]
fn an_unwritable_default_directory_fails_at_once() {
    with_fresh_sqlite(|ctx| {
        // A home that is a file: nothing can be made under it, not even by root.
        let home = ctx.path("home-is-a-file");
        std::fs::write(&home, "").unwrap();
        let key = ctx.key("k");
        let done: Vec<Done> = [
            vec!["acquire", &key, "--store-retry", "60s"],
            vec!["run", &key, "--store-retry", "60s", "--", "true"],
        ]
        .into_iter()
        .map(|args| {
            ctx.baton(args)
                .env("BATON_STORE", "")
                .env("HOME", &home)
                .env("XDG_STATE_HOME", "")
                .run_within(Duration::from_secs(90))
        })
        .collect();
        failed_at_once(&done, 1, "cannot create the directory");
    });
}

#[test]
fn a_bad_url_fails_at_once() {
    with_fresh_sqlite(|ctx| {
        failed_at_once(
            &waiting_commands(ctx, "sqlite-typo:/tmp/x.db"),
            2,
            "bad store URL",
        );
    });
}

/// A port nobody listens on may be a server restarting: it is retried for `--store-retry`,
/// saying so once.
#[test]
fn a_refused_port_is_still_retried() {
    with_fresh_sqlite(|ctx| {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let store = format!("--store=http://127.0.0.1:{port}");
        let key = ctx.key("k");
        let done = ctx
            .baton(["run", &key, &store, "--store-retry", "2s", "--", "true"])
            .run();
        done.assert_code(1);
        assert!(
            done.stderr
                .contains("retrying for up to 2s (--store-retry)"),
            "{}",
            done.describe()
        );
        assert!(
            done.elapsed >= Duration::from_secs(2),
            "{}",
            done.describe()
        );
    });
}

/// The reading commands, with a key and job where they take one.
fn reading_commands(key: &str) -> Vec<Vec<String>> {
    let commands: [&[&str]; 8] = [
        &["status"],
        &["log", key],
        &["jobs"],
        &["jobs", "show", key, "j-0123abcd"],
        &["why", key],
        &["kv", "get", "some/value"],
        &["kv", "ls"],
        &["notify", "ls"],
    ];
    commands
        .iter()
        .map(|args| args.iter().map(|arg| (*arg).to_owned()).collect())
        .collect()
}

#[test]
fn reading_a_store_that_does_not_exist_fails_and_creates_nothing() {
    with_fresh_sqlite(|ctx| {
        let typo = ctx.path("typo");
        let path = typo.join("baton.db");
        let store = format!("sqlite:{}", path.display());
        for args in reading_commands(&ctx.key("k")) {
            let done = ctx.baton(&args).env("BATON_STORE", &store).run();
            done.assert_code(1);
            let expected = format!("baton: no baton store at {store}: check the path");
            assert!(
                done.stderr.starts_with(&expected) && done.stderr.contains("baton init"),
                "{args:?}:\n{}",
                done.describe()
            );
            assert!(!typo.exists(), "{args:?} created {}", typo.display());
        }
        // A command that writes creates it, as before; then reading works.
        let key = ctx.key("k");
        let run = ["run", key.as_str(), "--", "true"];
        ctx.baton(run)
            .env("BATON_STORE", &store)
            .run()
            .assert_code(0);
        assert!(path.is_file());
        let done = ctx.baton(["log", &key]).env("BATON_STORE", &store).run();
        done.assert_code(0);
    });
}

/// `baton init` creates a store, and then the reading commands find it.
#[test]
fn init_creates_the_store_reading_commands_want() {
    with_fresh_sqlite(|ctx| {
        let path = ctx.path("made/by/init.db");
        let store = format!("sqlite:{}", path.display());
        ctx.baton(["status", "--store", &store])
            .run()
            .assert_code(1);
        ctx.baton(["init", "--store", &store]).run().assert_code(0);
        assert!(path.is_file());
        ctx.baton(["status", "--store", &store])
            .run()
            .assert_code(0);
    });
}

/// On a fresh machine (no `--store`, no `BATON_STORE`, no default store yet) the reading
/// commands find nothing held and no history, exit 0, and create nothing; the first command
/// that writes creates the default store.
#[test]
fn the_default_store_reads_as_empty_until_something_writes() {
    with_fresh_sqlite(|ctx| {
        let home = ctx.path("home");
        let default = home.join(".local/state/baton/baton.db");
        let key = ctx.key("k");
        let in_home = |args: &[&str]| {
            ctx.baton(args)
                .env("BATON_STORE", "")
                .env("HOME", &home)
                .env("XDG_STATE_HOME", "")
                .run()
        };
        let status = in_home(&["status"]);
        status.assert_code(0);
        assert!(status.stdout.contains("no keys"), "{}", status.describe());
        for args in [&["jobs"][..], &["kv", "ls"], &["notify", "ls"]] {
            in_home(args).assert_code(0);
        }
        in_home(&["log", &key]).assert_code(0);
        assert!(!home.exists(), "reading created {}", home.display());

        in_home(&["run", &key, "--", "true"]).assert_code(0);
        assert!(
            default.is_file(),
            "the first write creates the default store"
        );
        let log = in_home(&["log", &key]);
        log.assert_code(0);
        assert!(log.stdout.contains("succeeded"), "{}", log.describe());
    });
}
