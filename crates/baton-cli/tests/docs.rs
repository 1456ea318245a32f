//! Shell completions and manual pages come from the same definitions as `--help`.

use baton_testkit as common;

use common::with_fresh_sqlite;

#[test]
fn completions_for_each_shell_name_the_subcommands_and_flags() {
    with_fresh_sqlite(|ctx| {
        for shell in ["bash", "zsh", "fish"] {
            let done = ctx.baton(["completions", shell]).run();
            done.assert_code(0);
            // Flags without their dashes: fish writes `-l max-hold`.
            for word in [
                "run",
                "acquire",
                "release",
                "status",
                "cancel",
                "max-hold",
                "supersede",
            ] {
                assert!(
                    done.stdout.contains(word),
                    "{shell} completions lack {word}:\n{}",
                    done.describe()
                );
            }
        }
        let done = ctx.baton(["completions", "tcsh-ish"]).run();
        done.assert_code(2);
    });
}

#[test]
fn manual_pages_document_flags_and_exit_codes() {
    with_fresh_sqlite(|ctx| {
        let done = ctx.baton(["man"]).run();
        done.assert_code(0);
        assert!(
            done.stdout.starts_with(".ie") || done.stdout.contains(".TH baton"),
            "{}",
            done.describe()
        );
        assert!(done.stdout.contains("75"), "exit codes in baton(1)");
        let done = ctx.baton(["man", "run"]).run();
        done.assert_code(0);
        assert!(done.stdout.contains(".TH baton-run"), "{}", done.describe());
        assert!(done.stdout.contains("max\\-hold"), "{}", done.describe());
        assert!(done.stdout.contains("BATON_FENCE"), "{}", done.describe());
        let done = ctx.baton(["man", "nonsense"]).run();
        done.assert_code(2);
        assert!(done.stderr.contains("pages for"), "{}", done.describe());
    });
}
