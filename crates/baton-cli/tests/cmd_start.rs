//! CMD starts as a shell would start it: baton's supervisor execs it itself (it is started with
//! `vfork`, not by std's `Command`), so what std would hand CMD is checked here: the
//! environment with the turn's variables, the arguments as given, `execvp`'s lookup and its
//! fallback for scripts, and no signal blocked or ignored that a shell would not leave.

use baton_testkit as common;

use common::{with_fresh_sqlite, Ctx};

/// The lines of `env` as CMD saw it, run under `baton run` with `vars` added to baton's own.
fn cmds_environment(ctx: &Ctx, key: &str, vars: &[(&str, &str)]) -> Vec<String> {
    let mut run = ctx.baton(["run", "-q", key, "--", "env"]);
    for (name, value) in vars {
        run = run.env(name, value);
    }
    let done = run.run();
    done.assert_code(0);
    done.stdout.lines().map(str::to_owned).collect()
}

#[test]
fn cmd_gets_batons_environment_and_the_turns_variables_replace_inherited_ones() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("env");
        let lines = cmds_environment(
            ctx,
            &key,
            &[
                ("BATON_TEST_KEPT", "a value with spaces = and more"),
                ("BATON_KEY", "stale"),
            ],
        );
        let named = |name: &str| -> Vec<&String> {
            lines
                .iter()
                .filter(|line| line.starts_with(&format!("{name}=")))
                .collect()
        };
        assert_eq!(
            named("BATON_TEST_KEPT"),
            ["BATON_TEST_KEPT=a value with spaces = and more"],
            "{lines:#?}"
        );
        assert_eq!(
            named("BATON_KEY"),
            [&format!("BATON_KEY={key}")],
            "{lines:#?}"
        );
        assert_eq!(named("BATON_FENCE").len(), 1, "{lines:#?}");
        assert_eq!(named("BATON_TICKET").len(), 1, "{lines:#?}");
        assert!(!named("PATH").is_empty(), "PATH inherited: {lines:#?}");
    });
}

#[test]
fn cmd_gets_its_arguments_and_its_name_as_given() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("args");
        let done = ctx
            .baton([
                "run",
                "-q",
                &key,
                "--",
                "sh",
                "-c",
                r#"printf '<%s>' "$0" "$@""#,
                "zero",
                "two words",
                "",
                "ünïcode",
                "--flag",
            ])
            .run();
        done.assert_code(0);
        assert_eq!(
            done.stdout,
            "<zero><two words><><ünïcode><--flag>",
            "{}",
            done.describe()
        );
    });
}

/// `execvp` runs a script without a `#!` line through `/bin/sh`; a file without the execute
/// bit is refused with 126, as a shell does.
#[test]
fn a_script_without_an_interpreter_line_runs_and_a_file_that_is_not_executable_exits_126() {
    use std::os::unix::fs::PermissionsExt;
    with_fresh_sqlite(|ctx| {
        let script = ctx.path("plain-script");
        std::fs::write(&script, "echo ran as a script \"$1\"\n").expect("write the script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .expect("make it executable");
        let key = ctx.key("script");
        let script_arg = script.to_string_lossy().into_owned();
        let done = ctx.baton(["run", "-q", &key, "--", &script_arg, "x"]).run();
        done.assert_code(0);
        assert_eq!(done.stdout, "ran as a script x\n", "{}", done.describe());

        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644))
            .expect("take the execute bit away");
        let refused = ctx.baton(["run", "-q", &key, "--", &script_arg]).run();
        refused.assert_code(126);
        assert!(
            refused.stderr.contains("Permission denied"),
            "{}",
            refused.describe()
        );
    });
}

/// A signal mask line of `/proc/self/status` (`SigBlk`, `SigIgn`) in `status`, as a number.
fn signal_mask(status: &str, name: &str) -> u64 {
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {status}"));
    u64::from_str_radix(line.trim(), 16).unwrap_or_else(|_| panic!("{name}: {line}"))
}

/// The supervisor blocks every signal and baton handles some: CMD gets none blocked, and no
/// signal ignored that a shell started by this test's own process does not ignore too.
#[test]
fn cmd_starts_with_no_signal_blocked_or_ignored_beyond_a_shells() {
    with_fresh_sqlite(|ctx| {
        let show = "cat /proc/self/status";
        let direct = std::process::Command::new("sh")
            .args(["-c", show])
            .output()
            .expect("run sh");
        let direct = String::from_utf8_lossy(&direct.stdout).into_owned();
        let key = ctx.key("signals");
        let done = ctx.baton(["run", "-q", &key, "--", "sh", "-c", show]).run();
        done.assert_code(0);
        assert_eq!(
            signal_mask(&done.stdout, "SigBlk"),
            0,
            "{}",
            done.describe()
        );
        let ignored = signal_mask(&done.stdout, "SigIgn");
        let by_a_shell = signal_mask(&direct, "SigIgn");
        assert_eq!(
            ignored & !by_a_shell,
            0,
            "ignored under baton: {ignored:#x}, by a shell: {by_a_shell:#x}"
        );
    });
}
