//! The operator's view with real processes: the `status` table and its flags, `status --watch`
//! on a pipe and on a terminal, and `baton log` (table, JSON lines, `--follow`).
//!
//! Tables are read by their header: each cell starts where its header starts, so an empty cell
//! (a holder's position) reads as empty instead of shifting the row.

use baton_testkit as common;

use std::time::Duration;

use common::{for_each_store, send_signal, wait_until, with_fresh_sqlite, Ctx, PROMPT};
use serde_json::Value;

const POLL: &str = "200ms";

/// Starts gated holder `name` on `key` and waits until its command runs.
fn hold(ctx: &Ctx, name: &str, key: &str, extra: &[&str]) -> common::Proc {
    let proc = ctx.spawn_gated(name, key, extra);
    ctx.wait_started(name);
    proc
}

/// Starts gated waiter `name` and waits until status shows it queued.
fn enqueue(ctx: &Ctx, name: &str, key: &str) -> common::Proc {
    let proc = ctx.spawn_gated(name, key, &["--poll", POLL]);
    ctx.wait_queued(key, name);
    proc
}

/// A table as printed: its headers, and each row as (header, cell) pairs.
#[derive(Debug)]
struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<(String, String)>>,
    /// Lines after the rows (the left-out note, the per-key lines).
    after: Vec<String>,
}

impl Table {
    /// Reads the table that follows the `store:` line of `baton status`.
    fn parse(stdout: &str) -> Table {
        let mut lines = stdout.lines();
        let first = lines.next().unwrap_or_default();
        assert!(
            first.starts_with("store: "),
            "status starts with its store:\n{stdout}"
        );
        let header = lines.next().unwrap_or_default();
        let mut starts = Vec::new();
        let mut headers = Vec::new();
        let mut previous = ' ';
        for (index, c) in header.char_indices() {
            if c != ' ' && previous == ' ' {
                starts.push(index);
            }
            previous = c;
        }
        for (n, start) in starts.iter().enumerate() {
            let end = starts.get(n + 1).copied().unwrap_or(header.len());
            headers.push(header[*start..end].trim().to_owned());
        }
        let mut rows = Vec::new();
        let mut after = Vec::new();
        for line in lines {
            if !after.is_empty() || line.is_empty() || line.starts_with('…') {
                after.push(line.to_owned());
                continue;
            }
            let cell = |n: usize| {
                let start = starts[n].min(line.len());
                let end = starts
                    .get(n + 1)
                    .copied()
                    .unwrap_or(line.len())
                    .min(line.len());
                line.get(start..end).unwrap_or_default().trim().to_owned()
            };
            rows.push(
                headers
                    .iter()
                    .enumerate()
                    .map(|(n, h)| (h.clone(), cell(n)))
                    .collect(),
            );
        }
        Table {
            headers,
            rows,
            after,
        }
    }

    /// The rows of `key`, each as the cells of `columns`.
    fn rows_of(&self, key: &str, columns: &[&str]) -> Vec<Vec<String>> {
        self.rows
            .iter()
            .filter(|row| row.iter().any(|(h, v)| h == "KEY" && v == key))
            .map(|row| {
                columns
                    .iter()
                    .map(|column| {
                        row.iter()
                            .find(|(h, _)| h == column)
                            .map(|(_, v)| v.clone())
                            .unwrap_or_else(|| panic!("no column {column} in {row:?}"))
                    })
                    .collect()
            })
            .collect()
    }
}

fn status_text(ctx: &Ctx, extra: &[&str]) -> String {
    let mut args = vec!["status", ctx.prefix.as_str()];
    args.extend_from_slice(extra);
    let done = ctx.baton(args).run();
    done.assert_code(0);
    assert!(
        !done.stdout.contains('\x1b'),
        "no escape sequences when stdout is not a terminal:\n{}",
        done.describe()
    );
    done.stdout
}

#[test]
fn status_table_shows_holders_then_the_queue_and_its_flags_choose_rows_and_columns() {
    for_each_store(|ctx| {
        let busy = ctx.key("busy");
        let idle = ctx.key("idle");
        ctx.baton(["run", &idle, "--context", "I", "--", "false"])
            .run()
            .assert_code(1);
        let mut holder = hold(ctx, "H", &busy, &[]);
        let mut w1 = enqueue(ctx, "W1", &busy);
        let mut w2 = enqueue(ctx, "W2", &busy);
        let view = ctx.key_view(&busy);
        let holder_id = view.holders()[0].id.clone();
        let queue_ids: Vec<String> = view.queue().into_iter().map(|t| t.id).collect();

        // The default table: holder, then the queue in position order, then the free key.
        let table = Table::parse(&status_text(ctx, &[]));
        assert_eq!(
            table.headers,
            ["KEY", "STATE", "POS", "ID", "FENCE", "FOR", "LEASE", "CONTEXT"],
            "{table:?}"
        );
        let rows = table.rows_of(&busy, &["STATE", "POS", "ID", "CONTEXT"]);
        assert_eq!(
            rows,
            [
                vec![
                    "held".to_owned(),
                    String::new(),
                    holder_id.clone(),
                    "H".into()
                ],
                vec![
                    "queued".into(),
                    "1".into(),
                    queue_ids[0].clone(),
                    "W1".into()
                ],
                vec![
                    "queued".into(),
                    "2".into(),
                    queue_ids[1].clone(),
                    "W2".into()
                ],
            ],
            "{table:?}"
        );
        let held = &table.rows_of(&busy, &["FENCE", "FOR", "LEASE"])[0];
        assert_eq!(held[0], view.fence().unwrap_or_default().to_string());
        assert!(
            held[1].ends_with('s') && !held[2].is_empty(),
            "held for and lease left are durations: {held:?}"
        );
        let free = table.rows_of(&idle, &["STATE", "CONTEXT"]);
        assert_eq!(
            free,
            [vec!["free".to_owned(), "last turn failed".into()]],
            "{table:?}"
        );
        assert!(
            table
                .after
                .iter()
                .any(|l| l.starts_with(&format!("{busy}: limit 1, no turn has ended yet"))),
            "a line per busy key under the table: {table:?}"
        );

        // --state
        let queued = Table::parse(&status_text(ctx, &["-s", "queued"]));
        assert_eq!(
            queued
                .rows
                .iter()
                .map(|row| (row[1].1.clone(), row[7].1.clone()))
                .collect::<Vec<_>>(),
            [
                ("queued".into(), "W1".into()),
                ("queued".into(), "W2".into())
            ],
            "{queued:?}"
        );
        let held_only = Table::parse(&status_text(ctx, &["--state", "held"]));
        assert_eq!(
            held_only.rows_of(&busy, &["CONTEXT"]),
            [["H"]],
            "{held_only:?}"
        );
        assert_eq!(
            held_only.rows.len(),
            1,
            "no free rows with -s held: {held_only:?}"
        );
        let free_only = Table::parse(&status_text(ctx, &["-s", "free"]));
        assert_eq!(free_only.rows_of(&idle, &["STATE"]), [["free"]]);
        assert_eq!(free_only.rows.len(), 1, "{free_only:?}");

        // --columns
        let chosen = Table::parse(&status_text(ctx, &["-c", "key,id"]));
        assert_eq!(chosen.headers, ["KEY", "ID"], "{chosen:?}");
        assert_eq!(
            chosen.rows_of(&busy, &["ID"]),
            [
                [holder_id.as_str()],
                [queue_ids[0].as_str()],
                [queue_ids[1].as_str()]
            ],
            "{chosen:?}"
        );
        let all = Table::parse(&status_text(ctx, &["-c", "all"]));
        for column in ["MODE", "ORDER", "LIMIT", "LAST", "FAILURES", "LEASE"] {
            assert!(all.headers.iter().any(|h| h == column), "{column}: {all:?}");
        }
        assert_eq!(all.rows_of(&idle, &["LAST", "FAILURES"]), [["failed", "1"]]);
        let bogus = ctx.baton(["status", &ctx.prefix, "-c", "key,bogus"]).run();
        bogus.assert_refused(&[2]);
        assert!(
            bogus.stderr.contains("bogus") && bogus.stderr.contains("lease_left"),
            "names the bad column and the valid ones:\n{}",
            bogus.describe()
        );
        ctx.baton(["status", &ctx.prefix, "-s", "gone"])
            .run()
            .assert_refused(&[2]);
        ctx.baton(["status", &ctx.prefix, "-n", "0"])
            .run()
            .assert_refused(&[2]);

        // --limit-rows: 3 tickets and one free row, 1 shown.
        let limited = Table::parse(&status_text(ctx, &["-n", "1"]));
        assert_eq!(limited.rows.len(), 1, "{limited:?}");
        assert_eq!(limited.rows_of(&busy, &["CONTEXT"]), [["H"]]);
        assert!(
            limited
                .after
                .iter()
                .any(|l| l.contains("3 more rows not shown")),
            "{limited:?}"
        );

        // -s and -l apply to JSON too.
        let json = |extra: &[&str]| -> Value {
            let mut args = vec!["status", ctx.prefix.as_str(), "--json"];
            args.extend_from_slice(extra);
            let done = ctx.baton(args).run();
            done.assert_code(0);
            serde_json::from_str(&done.stdout).unwrap_or_else(|e| panic!("{e}: {}", done.stdout))
        };
        let queued_json = json(&["-s", "queued"]);
        let keys = queued_json["keys"].as_array().cloned().unwrap_or_default();
        assert_eq!(
            keys.len(),
            1,
            "only the busy key has queued rows: {queued_json}"
        );
        assert_eq!(keys[0]["holders"].as_array().map(Vec::len), Some(0));
        assert_eq!(keys[0]["queue"].as_array().map(Vec::len), Some(2));
        let limited_json = json(&["-l", "2"]);
        assert_eq!(limited_json["rows_left_out"], 2, "{limited_json}");
        assert_eq!(
            limited_json["keys"][0]["queue"].as_array().map(Vec::len),
            Some(1)
        );

        // NO_COLOR changes nothing off a terminal: still no escapes.
        let plain = ctx
            .baton(["status", ctx.prefix.as_str()])
            .env("NO_COLOR", "1")
            .run();
        plain.assert_code(0);
        assert!(!plain.stdout.contains('\x1b'), "{}", plain.describe());

        for (name, proc) in [("H", &mut holder), ("W1", &mut w1), ("W2", &mut w2)] {
            ctx.open_gate(name);
            proc.wait(PROMPT).assert_code(0);
        }
    });
}

/// Runs `inner` (a shell command line) under a pseudo-terminal and returns what it printed.
fn on_terminal(ctx: &Ctx, name: &str, inner: &str) -> String {
    let script = format!("script -qec '{}' /dev/null", inner.replace('\'', r"'\''"));
    let done = ctx.sh(name, &script).run();
    done.assert_code(0);
    done.stdout
}

#[test]
fn on_a_terminal_status_is_coloured_cut_to_width_and_watch_redraws_until_ctrl_c() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("tty");
        let context = format!("a long context {}", "x".repeat(200));
        let gate = Ctx::gate_script("T");
        let mut holder = ctx
            .baton(["run", &key, "--context", &context, "--", "sh", "-c", &gate])
            .spawn();
        ctx.wait_started("T");
        let baton = format!("\"$TEST_BATON\" status '{}'", ctx.prefix);

        let coloured = on_terminal(ctx, "tty-colour", &format!("stty cols 120; {baton}"));
        assert!(
            coloured.contains("\x1b[32mheld"),
            "held is green:\n{coloured:?}"
        );
        // Count what shows: not the colour codes.
        let widest = coloured
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .map(|l| {
                l.replace("\x1b[32m", "")
                    .replace("\x1b[0m", "")
                    .chars()
                    .count()
            })
            .max()
            .unwrap_or(0);
        assert!(
            widest <= 120 && coloured.contains('…'),
            "the context is cut to the terminal's 120 columns:\n{coloured}"
        );

        let plain = on_terminal(
            ctx,
            "tty-no-colour",
            &format!("stty cols 120; NO_COLOR=1 {baton}"),
        );
        assert!(plain.contains("held"), "{plain}");
        assert!(
            !plain.contains("\x1b["),
            "NO_COLOR turns colour off:\n{plain:?}"
        );

        let watched = on_terminal(
            ctx,
            "tty-watch",
            &format!("timeout --preserve-status -s INT 2 {baton} -w --interval 200ms; echo \"baton exited $?\""),
        );
        assert!(
            watched.contains("\x1b[2J"),
            "the screen is cleared:\n{watched:?}"
        );
        assert!(
            watched.matches("\x1b[H").count() >= 3,
            "redrawn in place several times:\n{watched:?}"
        );
        assert!(watched.contains("every 200ms"), "{watched:?}");
        assert!(
            watched.contains("baton exited 0"),
            "Ctrl-C ends a watch with 0:\n{watched}"
        );

        ctx.open_gate("T");
        holder.wait(PROMPT).assert_code(0);
    });
}

/// The lines a terminal shows of `output`: carriage returns and colours taken out.
fn shown_lines(output: &str) -> Vec<String> {
    output
        .lines()
        .map(|l| {
            l.trim_end_matches('\r')
                .replace("\x1b[32m", "")
                .replace("\x1b[33m", "")
                .replace("\x1b[31m", "")
                .replace("\x1b[0m", "")
        })
        .collect()
}

#[test]
fn on_a_short_terminal_free_keys_give_way_to_busy_ones_and_rows_fit_80_columns() {
    with_fresh_sqlite(|ctx| {
        for n in 0..15 {
            let idle = ctx.key(&format!("idle-{n:02}"));
            ctx.baton(["run", &idle, "--", "true"]).run().assert_code(0);
        }
        let broken = ctx.key("broken");
        ctx.baton(["run", &broken, "--", "false"])
            .run()
            .assert_code(1);
        let busy = ctx.key("zz-busy");
        let context = format!("deploying build 4711 {}", "x".repeat(100));
        let gate = Ctx::gate_script("H");
        let mut holder = ctx
            .baton(["run", &busy, "--context", &context, "--", "sh", "-c", &gate])
            .spawn();
        ctx.wait_started("H");
        let baton = format!("\"$TEST_BATON\" status '{}'", ctx.prefix);

        // 12 rows: the store line, the header, the busy row, the failing row and 15 free ones,
        // the key line under them and the prompt do not fit.
        let short = shown_lines(&on_terminal(
            ctx,
            "tty-short",
            &format!("stty rows 12 cols 80; {baton}"),
        ));
        assert!(short.len() <= 11, "{short:#?}");
        assert!(
            short.iter().all(|l| l.chars().count() <= 80),
            "no line wraps at 80 columns: {short:#?}"
        );
        let at = |needle: &str| short.iter().position(|l| l.contains(needle));
        let (busy_at, broken_at) = (at("zz-busy"), at("broken"));
        assert!(
            busy_at.is_some() && busy_at < broken_at && broken_at < at("idle-00"),
            "busy, then failing, then free: {short:#?}"
        );
        let busy_row = &short[busy_at.unwrap_or_default()];
        assert!(
            busy_row.ends_with('…') && !busy_row.contains(&context),
            "the context is cut: {short:#?}"
        );
        let n_free = short.iter().filter(|l| l.contains("idle-")).count();
        let note = format!(
            "… {} free keys left out to keep the busy ones on screen (-s all shows them)",
            15 - n_free
        );
        assert!(
            n_free < 15 && short.contains(&note),
            "says how many were left out: {short:#?}"
        );

        // -s all on the same terminal, and a pipe: every free key.
        let all = shown_lines(&on_terminal(
            ctx,
            "tty-all",
            &format!("stty rows 12 cols 80; {baton} -s all"),
        ));
        assert_eq!(
            all.iter().filter(|l| l.contains("idle-")).count(),
            15,
            "{all:#?}"
        );
        let piped = status_text(ctx, &[]);
        assert_eq!(piped.matches("idle-").count(), 15, "{piped}");
        assert!(!piped.contains("left out"), "{piped}");
        let table = Table::parse(&piped);
        let keys: Vec<&str> = table.rows.iter().map(|row| row[0].1.as_str()).collect();
        assert_eq!(keys.first().copied(), Some(busy.as_str()), "{piped}");
        assert_eq!(keys.get(1).copied(), Some(broken.as_str()), "{piped}");

        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
    });
}

/// Waits until the file of `proc`'s stdout has a line containing every one of `needles`.
fn wait_line(proc: &common::Proc, what: &str, needles: &[&str]) -> String {
    common::wait_for(what, PROMPT, || {
        proc.stdout()
            .lines()
            .find(|l| needles.iter().all(|n| l.contains(n)))
            .map(str::to_owned)
    })
}

#[test]
fn status_watch_off_a_terminal_prints_the_table_then_one_line_per_change() {
    for_each_store(|ctx| {
        let key = ctx.key("watched");
        let mut holder = hold(ctx, "H", &key, &[]);
        let mut waiter = enqueue(ctx, "W", &key);
        let view = ctx.key_view(&key);
        let holder_id = view.holders()[0].id.clone();
        let waiter_id = view.queue()[0].id.clone();

        let mut watch = ctx
            .baton(["status", &ctx.prefix, "-w", "--interval", "200ms"])
            .name("watch")
            .spawn();
        let mut json_watch = ctx
            .baton(["status", &ctx.prefix, "-w", "--interval", "200ms", "--json"])
            .name("watch-json")
            .spawn();
        wait_line(&watch, "the first table", &["KEY", "STATE"]);
        wait_line(&json_watch, "the first JSON object", &["\"keys\""]);

        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
        let left = wait_line(&watch, "H left", &[&holder_id, "left ("]);
        assert!(
            left.ends_with(&format!("{key}: {holder_id} left (succeeded)")),
            "{left}"
        );
        let granted = wait_line(&watch, "W granted", &[&waiter_id, "granted"]);
        let fence = ctx.key_view(&key).fence().unwrap_or_default();
        assert!(
            granted.ends_with(&format!("{key}: {waiter_id} granted (fence {fence}) to W")),
            "{granted}"
        );
        // A timestamp first: 2026-11-22T01:02:03Z.
        let stamp = granted.split(' ').next().unwrap_or_default();
        assert!(
            stamp.len() == 20 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
            "{granted}"
        );

        let mut late = ctx.spawn_gated("L", &key, &["--poll", POLL]);
        let late_id = ctx.wait_queued(&key, "L").queue()[0].id.clone();
        let queued = wait_line(&watch, "L queued", &[&late_id, "queued"]);
        assert!(queued.ends_with("queued at position 1 (L)"), "{queued}");

        // The JSON form: the status object, then one object per change.
        let events: Vec<Value> = common::wait_for("three JSON events", PROMPT, || {
            let events: Vec<Value> = json_watch
                .stdout()
                .lines()
                .skip(1)
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            (events.len() >= 3).then_some(events)
        });
        let kinds: Vec<(&str, &str)> = events
            .iter()
            .map(|e| {
                (
                    e["event"].as_str().unwrap_or("?"),
                    e["id"].as_str().unwrap_or("?"),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("left", holder_id.as_str()),
                ("granted", waiter_id.as_str()),
                ("queued", late_id.as_str())
            ],
            "{events:?}"
        );
        assert_eq!(events[0]["outcome"], "succeeded");
        assert_eq!(events[1]["fence"], fence);
        assert_eq!(events[2]["position"], 1);

        send_signal(watch.pid(), libc::SIGINT);
        watch.wait(PROMPT).assert_code(0);
        send_signal(json_watch.pid(), libc::SIGINT);
        json_watch.wait(PROMPT).assert_code(0);
        ctx.open_gate("W");
        waiter.wait(PROMPT).assert_code(0);
        ctx.open_gate("L");
        late.wait(PROMPT).assert_code(0);
    });
}

/// Milliseconds since the epoch of `2026-11-22T01:02:03.456Z`.
fn rfc3339_ms(text: &str) -> i64 {
    let number = |range: std::ops::Range<usize>| -> i64 {
        text.get(range)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("not RFC 3339: {text}"))
    };
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    let (hour, minute, second, milli) = (
        number(11..13),
        number(14..16),
        number(17..19),
        number(20..23),
    );
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + milli
}

#[test]
fn log_shows_outcomes_newest_first_with_consistent_waits_and_holds() {
    for_each_store(|ctx| {
        let key = ctx.key("logged");
        let none = ctx.baton(["log", &key]).run();
        none.assert_code(0);
        assert!(none.stdout.is_empty(), "{}", none.describe());
        assert!(
            none.stderr.contains("no history for"),
            "{}",
            none.describe()
        );

        ctx.baton(["run", &key, "--context", "r1", "--", "true"])
            .run()
            .assert_code(0);
        ctx.baton([
            "run",
            &key,
            "--context",
            "r2",
            "--",
            "sh",
            "-c",
            "sleep 0.3; exit 3",
        ])
        .run()
        .assert_code(3);
        let acquired = ctx
            .baton(["acquire", &key, "--context", "r3", "--ttl", "1m", "--json"])
            .run();
        acquired.assert_code(0);
        let acquired: Value = serde_json::from_str(&acquired.stdout).expect("acquire --json");
        let forced_id = acquired["id"].as_str().unwrap_or_default().to_owned();
        ctx.baton(["cancel", &key, &forced_id]).run().assert_code(0);

        let done = ctx.baton(["log", &key]).run();
        done.assert_code(0);
        assert!(!done.stdout.contains('\x1b'), "{}", done.describe());
        let lines: Vec<&str> = done.stdout.lines().collect();
        assert!(
            lines[0].starts_with("WHEN") && lines[0].contains("OUTCOME"),
            "{}",
            done.stdout
        );
        let contexts_and_outcomes: Vec<(bool, &str)> = lines[1..]
            .iter()
            .map(|l| {
                let outcome = ["cancelled (forced)", "failed", "succeeded"]
                    .into_iter()
                    .find(|o| l.contains(o))
                    .unwrap_or("?");
                (l.contains(&forced_id), outcome)
            })
            .collect();
        assert_eq!(
            contexts_and_outcomes,
            [
                (true, "cancelled (forced)"),
                (false, "failed"),
                (false, "succeeded")
            ],
            "newest first:\n{}",
            done.stdout
        );

        let done = ctx.baton(["log", &key, "--json"]).run();
        done.assert_code(0);
        let entries: Vec<Value> = done
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let outcomes: Vec<(&str, bool, &str)> = entries
            .iter()
            .map(|e| {
                (
                    e["outcome"].as_str().unwrap_or("?"),
                    e["forced"].as_bool().unwrap_or(false),
                    e["context"].as_str().unwrap_or("?"),
                )
            })
            .collect();
        assert_eq!(
            outcomes,
            [
                ("cancelled", true, "r3"),
                ("failed", false, "r2"),
                ("succeeded", false, "r1")
            ]
        );
        let seqs: Vec<u64> = entries.iter().filter_map(|e| e["seq"].as_u64()).collect();
        assert!(
            seqs.len() == 3 && seqs[0] > seqs[1] && seqs[1] > seqs[2],
            "{seqs:?}"
        );
        for entry in &entries {
            for field in ["id", "reason", "order", "mode", "fence", "enqueued_at"] {
                assert!(entry.get(field).is_some(), "{field} in {entry}");
            }
            let enqueued = rfc3339_ms(entry["enqueued_at"].as_str().unwrap_or_default());
            let acquired = rfc3339_ms(entry["acquired_at"].as_str().unwrap_or_default());
            let released = rfc3339_ms(entry["released_at"].as_str().unwrap_or_default());
            let wait_ms = entry["wait_ms"].as_i64().unwrap_or(-1);
            let hold_ms = entry["hold_ms"].as_i64().unwrap_or(-1);
            assert!(wait_ms >= 0 && hold_ms >= 0, "{entry}");
            assert_eq!(wait_ms, acquired - enqueued, "{entry}");
            assert_eq!(hold_ms, released - acquired, "{entry}");
            assert!(entry["fence"].as_u64().is_some_and(|f| f > 0), "{entry}");
        }
        assert!(
            entries[1]["hold_ms"].as_i64().unwrap_or(0) >= 300,
            "r2 held for its sleep: {}",
            entries[1]
        );

        let two = ctx.baton(["log", &key, "-n", "2", "--json"]).run();
        two.assert_code(0);
        assert_eq!(two.stdout.lines().count(), 2, "{}", two.describe());
        ctx.baton(["log", &key, "-n", "0"])
            .run()
            .assert_refused(&[2]);
        ctx.baton(["log", ""]).run().assert_refused(&[2]);
        ctx.baton(["log", "bad\tkey"]).run().assert_refused(&[2]);
    });
}

#[test]
fn log_follow_prints_entries_recorded_after_it_started() {
    for_each_store(|ctx| {
        let key = ctx.key("followed");
        ctx.baton(["run", &key, "--context", "first-run", "--", "true"])
            .run()
            .assert_code(0);
        let mut follow = ctx.baton(["log", &key, "-f"]).name("follow").spawn();
        let mut follow_json = ctx
            .baton(["log", &key, "-f", "--json"])
            .name("follow-json")
            .spawn();
        wait_line(&follow, "the first entry", &["first-run", "succeeded"]);
        wait_line(&follow_json, "the first JSON entry", &["\"first-run\""]);

        ctx.baton(["run", &key, "--context", "second-run", "--", "false"])
            .run()
            .assert_code(1);
        wait_line(&follow, "the new entry", &["second-run", "failed"]);
        wait_line(&follow_json, "the new JSON entry", &["\"second-run\""]);
        let text = follow.stdout();
        let lines: Vec<&str> = text.lines().collect();
        let at = |needle: &str| lines.iter().position(|l| l.contains(needle));
        assert!(lines[0].starts_with("WHEN"), "{text}");
        assert!(
            matches!((at("first-run"), at("second-run")), (Some(a), Some(b)) if a < b),
            "oldest first, new entries appended:\n{text}"
        );

        send_signal(follow.pid(), libc::SIGINT);
        follow.wait(PROMPT).assert_code(0);
        send_signal(follow_json.pid(), libc::SIGINT);
        follow_json.wait(PROMPT).assert_code(0);
        let contexts: Vec<String> = follow_json
            .stdout()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|e| e["context"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(contexts, ["first-run", "second-run"]);

        // Following a key with no history yet says so, then prints its first entry.
        let fresh = ctx.key("fresh");
        let mut empty = ctx
            .baton(["log", &fresh, "--follow"])
            .name("follow-fresh")
            .spawn();
        wait_until("the no-history message", PROMPT, || {
            empty.stderr().contains("no history for")
        });
        std::thread::sleep(Duration::from_millis(200));
        ctx.baton(["run", &fresh, "--context", "fresh-run", "--", "true"])
            .run()
            .assert_code(0);
        wait_line(
            &empty,
            "the first entry of a fresh key",
            &["fresh-run", "succeeded"],
        );
        send_signal(empty.pid(), libc::SIGINT);
        empty.wait(PROMPT).assert_code(0);
    });
}

/// A turn that is granted and leaves between two reads of a watch still shows its grant: the
/// history says it held, so `granted` is printed between its `queued` and its `left`.
#[test]
fn status_watch_prints_a_grant_that_came_and_went_between_two_reads() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("quick");
        let mut holder = hold(ctx, "H", &key, &[]);
        // A long interval: the waiter's grant and its end fall between two reads.
        let mut watch = ctx
            .baton(["status", &ctx.prefix, "-w", "--interval", "5s"])
            .name("watch")
            .spawn();
        wait_line(&watch, "the first table", &["KEY", "STATE"]);
        let mut quick = ctx
            .baton(["run", &key, "--context", "Q", "--poll", POLL, "--", "true"])
            .name("Q")
            .spawn();
        let quick_id = ctx.wait_queued(&key, "Q").queue()[0].id.clone();
        wait_line(&watch, "Q queued", &[&quick_id, "queued"]);
        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
        quick.wait(PROMPT).assert_code(0);
        wait_line(&watch, "Q left", &[&quick_id, "left ("]);
        let lines: Vec<String> = watch
            .stdout()
            .lines()
            .filter(|l| l.contains(&quick_id))
            .map(|l| l.split_once(": ").map_or(l, |(_, rest)| rest).to_owned())
            .collect();
        let fence = ctx.key_view(&key).fence().unwrap_or_default();
        assert_eq!(
            lines,
            [
                format!("{quick_id} queued at position 1 (Q)"),
                format!("{quick_id} granted (fence {fence}) to Q"),
                format!("{quick_id} left (succeeded)"),
            ],
            "{}",
            watch.stdout()
        );
        send_signal(watch.pid(), libc::SIGINT);
        watch.wait(PROMPT).assert_code(0);
    });
}
