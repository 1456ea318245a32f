//! An interactive command gets the terminal: run under a pseudo-terminal (`script`), `baton run`
//! makes CMD's process group the terminal's foreground group, so it can read the keyboard and
//! receives Ctrl-C itself; baton takes the terminal back afterwards.

use baton_testkit as common;

use common::with_fresh_sqlite;

#[test]
fn an_interactive_command_gets_the_terminal() {
    with_fresh_sqlite(|ctx| {
        // Fields 5 and 8 of /proc/PID/stat: the process group and the terminal's foreground
        // process group.
        std::fs::write(
            ctx.path("fg.sh"),
            "awk '{ if ($5 == $8) print \"FOREGROUND\"; else print \"BACKGROUND\", $5, $8 }' /proc/$$/stat\n",
        )
        .expect("write fg.sh");
        let key = ctx.key("tty");
        let inner = format!(
            "\"$TEST_BATON\" run -q '{key}' -- sh \"$TEST_DIR/fg.sh\"; echo \"baton exited $?\""
        );
        let script = format!("script -qec '{}' /dev/null", inner.replace('\'', r"'\''"));
        let done = ctx.sh("script", &script).run();
        done.assert_code(0);
        assert!(
            done.stdout.contains("FOREGROUND"),
            "CMD must own the terminal:\n{}",
            done.describe()
        );
        assert!(
            done.stdout.contains("baton exited 0"),
            "{}",
            done.describe()
        );
    });
}
