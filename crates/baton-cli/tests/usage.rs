//! The command line reads the same everywhere: one name per meaning, usage lines in argument
//! order, the global options once, options only where they apply, commands in an order a reader
//! can follow, and typos answered with the right word.

use baton_testkit as common;

use common::help::{command_paths, help_of, listed_commands, option_lines};
use common::with_fresh_sqlite;

#[test]
fn commands_are_listed_in_the_order_a_reader_follows() {
    let listed = listed_commands(&[]);
    let groups: [&[&str]; 8] = [
        &[
            "run", "acquire", "release", "renew", "status", "check", "cancel", "log",
        ],
        &[
            "submit", "worker", "jobs", "wait", "why", "complete", "retry",
        ],
        &["once"],
        &["kv"],
        &["notify"],
        &["pause", "resume", "reap", "init"],
        &["serve", "tokens"],
        &["completions", "man"],
    ];
    let expected: Vec<String> = groups.concat().iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(listed, expected);
}

/// The row cap is `-n`/`--max-rows` wherever rows are listed, and `--limit` is only ever the
/// number of holders at once; the names before still work, unlisted.
#[test]
fn one_name_per_meaning() {
    for path in command_paths() {
        let args: Vec<&str> = path.split(' ').collect();
        let help = help_of(&args);
        for line in option_lines(&help) {
            for old in ["--limit-rows", "--lines", "-l,"] {
                assert!(
                    !line.starts_with(old),
                    "`baton {path}` offers {old}: {line}"
                );
            }
            if line.starts_with("--limit ") {
                assert!(
                    line.contains("at once"),
                    "`baton {path}` --limit is not the semaphore size: {line}"
                );
            }
        }
    }
    for command in [vec!["status"], vec!["jobs"], vec!["log", "k"]] {
        let help = help_of(&command[..1]);
        assert!(
            option_lines(&help)
                .iter()
                .any(|l| l.starts_with("-n, --max-rows <N>")),
            "{command:?}: {help}"
        );
    }
    with_fresh_sqlite(|ctx| {
        ctx.baton(["run", &ctx.key("k"), "--", "true"])
            .run()
            .assert_code(0);
        for args in [
            vec!["status", "-l", "1"],
            vec!["status", "--limit-rows", "1"],
            vec!["jobs", "-l", "1"],
            vec!["log", "--lines", "1", &ctx.key("k")],
            vec!["log", "-n", "1", &ctx.key("k")],
        ] {
            ctx.baton(&args).run().assert_code(0);
        }
    });
}

#[test]
fn usage_lines_follow_the_argument_order() {
    let help = help_of(&["cancel"]);
    assert!(
        help.contains("Usage: baton cancel [OPTIONS] <KEY> <ID|--queued>"),
        "{help}"
    );
}

/// `--store`'s URL forms are told once, in `baton --help`; every command lists the options
/// it shares under one heading, in a line each.
#[test]
fn global_options_are_told_once_under_their_heading() {
    let top = help_of(&[]);
    assert!(top.contains("dynamodb://TABLE"), "{top}");
    for path in command_paths() {
        let args: Vec<&str> = path.split(' ').collect();
        let help = help_of(&args);
        let forms = [
            "redis://HOST",
            "etcd://HOST",
            "s3://BUCKET",
            "dynamodb://TABLE",
        ];
        assert!(
            !forms.iter().all(|form| help.contains(form)),
            "`baton {path} --help` repeats the store URLs"
        );
        let Some((own, global)) = help.split_once("Global options:") else {
            panic!("`baton {path} --help` has no Global options heading:\n{help}");
        };
        let own_options = own.split_once("Options:").map_or("", |(_, o)| o);
        for shared in ["--store <URL>", "--token <TOKEN>", "--verbose"] {
            assert!(
                !own_options.contains(shared),
                "`baton {path}` lists {shared} among its own options"
            );
        }
        assert!(global.contains("--verbose"), "`baton {path}`: {global}");
    }
}

#[test]
fn options_that_do_not_apply_are_not_offered() {
    for path in ["serve", "tokens new", "tokens ls", "completions", "man"] {
        let args: Vec<&str> = path.split(' ').collect();
        let help = help_of(&args);
        assert!(!help.contains("--token <"), "`baton {path}` offers --token");
    }
    for path in ["tokens new", "completions", "man"] {
        let args: Vec<&str> = path.split(' ').collect();
        let help = help_of(&args);
        assert!(!help.contains("--store <"), "`baton {path}` offers --store");
    }
    with_fresh_sqlite(|ctx| {
        let refused = ctx.baton(["serve", "--token", "x"]).run();
        refused.assert_code(2);
        assert!(
            refused.stderr.contains("takes none"),
            "{}",
            refused.describe()
        );
        let refused = ctx.baton(["completions", "bash", "--store", "x"]).run();
        refused.assert_code(2);
    });
}

#[test]
fn typos_are_answered_with_the_right_word() {
    with_fresh_sqlite(|ctx| {
        let done = ctx.baton(["stauts"]).run();
        done.assert_code(2);
        assert!(done.stderr.contains("'status'"), "{}", done.describe());
        let done = ctx.baton(["jobs", "shwo", "k", "j"]).run();
        done.assert_code(2);
        assert!(
            done.stderr.contains("unknown subcommand shwo"),
            "{}",
            done.describe()
        );
        assert!(
            done.stderr.contains("baton jobs show k j"),
            "{}",
            done.describe()
        );
    });
}

/// `baton release KEY --token T` reads like the turn's token given by name, but `--token` is
/// the one for `baton serve`: the error says where the turn's token goes.
#[test]
fn a_turns_token_given_as_the_servers_is_pointed_to_its_place() {
    with_fresh_sqlite(|ctx| {
        for command in ["release", "renew"] {
            for args in [
                vec![command, "k", "--token", "t-123"],
                vec![command, "--token=t-123", "k"],
            ] {
                let refused = ctx.baton(args).run();
                refused.assert_code(2);
                let tip = format!(
                    "tip: the turn's token is the argument after the key: `baton {command} KEY TOKEN`"
                );
                assert!(refused.stderr.contains(&tip), "{}", refused.describe());
            }
        }
        let refused = ctx.baton(["release", "k"]).run();
        refused.assert_code(2);
        assert!(!refused.stderr.contains("tip:"), "{}", refused.describe());
    });
}
