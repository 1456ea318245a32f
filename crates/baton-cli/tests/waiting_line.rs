//! What a waiter prints while it waits. In a log (not a terminal): a line when the wait starts
//! and one whenever its position changes, each naming the holder and its context. On a
//! terminal: one line redrawn in place, cleared when the turn comes.

use baton_testkit as common;

use common::{for_each_store, with_fresh_sqlite};

#[test]
fn a_log_gets_a_line_at_the_start_and_at_each_change_of_position() {
    for_each_store(|ctx| {
        let key = ctx.key("line");
        let mut holder = ctx.spawn_gated("holder", &key, &[]);
        ctx.wait_started("holder");
        let mut first = ctx.spawn_gated("first", &key, &[]);
        ctx.wait_queued(&key, "first");
        let mut second = ctx.spawn_gated("second", &key, &[]);
        ctx.wait_queued(&key, "second");
        ctx.open_gate("holder");
        holder.wait(common::PROMPT).assert_code(0);
        ctx.wait_started("first");
        // "second" is next in line for as long as "first" holds: it must say so then. (On a
        // store without push it learns of the change at its next read, up to a poll interval
        // later, so "first" holds until the line is there rather than for an arbitrary time.)
        common::wait_until(
            "\"second\" to log that it is next in line",
            common::PROMPT,
            || {
                second
                    .stderr()
                    .lines()
                    .any(|l| l.contains("next in line") && l.contains("(first)"))
            },
        );
        ctx.open_gate("first");
        first.wait(common::PROMPT).assert_code(0);
        ctx.wait_started("second");
        ctx.open_gate("second");
        let done = second.wait(common::PROMPT);
        done.assert_code(0);
        let lines: Vec<&str> = done
            .stderr
            .lines()
            .filter(|l| l.contains("waiting for"))
            .collect();
        assert!(
            lines.len() >= 2,
            "a line at the start and one at the change:\n{}",
            done.describe()
        );
        assert!(
            lines[0].contains("1 ahead")
                && lines[0].contains("held by")
                && lines[0].contains("(holder)"),
            "the first line says the position, the holder and its context:\n{}",
            done.describe()
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("next in line") && l.contains("(first)")),
            "a line when it moved up, naming the new holder:\n{}",
            done.describe()
        );
        assert!(
            !done.stderr.contains('\r') && !done.stderr.contains('\x1b'),
            "no terminal control in a log:\n{}",
            done.describe()
        );
        // Quiet is quiet.
        let _holder2 = ctx.spawn_gated("holder2", &key, &[]);
        ctx.wait_started("holder2");
        let quiet = ctx
            .baton(["run", "-q", "--timeout", "0", &key, "--", "true"])
            .run();
        quiet.assert_code(75);
        assert!(
            !quiet.stderr.contains("baton: waiting for"),
            "{}",
            quiet.describe()
        );
        ctx.open_gate("holder2");
    });
}

#[test]
fn a_terminal_gets_one_line_redrawn_in_place_and_cleared() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("tty");
        let _holder = ctx.spawn_gated("holder", &key, &[]);
        ctx.wait_started("holder");
        // Let the holder go after a second, while the waiter redraws its line on a terminal.
        let _opener = ctx
            .sh("opener", "sleep 1; touch \"$TEST_DIR/holder.go\"")
            .spawn();
        let inner = format!("\"$TEST_BATON\" run --poll 100ms '{key}' -- true 2>&1");
        let script = format!("script -qec '{}' /dev/null", inner.replace('\'', r"'\''"));
        let done = ctx.sh("script", &script).run();
        done.assert_code(0);
        let out = &done.stdout;
        assert!(
            out.contains("\r\x1b[Kbaton: waiting for"),
            "drawn in place:\n{}",
            done.describe()
        );
        assert!(
            out.matches("\r\x1b[Kbaton: waiting for").count() >= 2,
            "redrawn while waiting:\n{}",
            done.describe()
        );
        assert!(
            out.contains("\r\x1b[Kbaton: holding"),
            "cleared before the next message:\n{}",
            done.describe()
        );
    });
}
