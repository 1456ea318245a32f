//! `baton pause` and `baton resume` with real processes on every store under test: a pause
//! lets the holder finish and holds the next waiter, whose waiting line says why; `status` and
//! `log` show who paused and why; a resume lets the waiter go; a scheduled window opens and
//! closes by itself; `--override-freeze` is granted in its turn and recorded; and the refusals
//! say what to do.

use baton_testkit as common;

use std::time::Duration;

use common::{for_each_store, wait_until, with_fresh_sqlite, Ctx, PROMPT};
use serde_json::Value;

/// Spawns `baton run KEY --context NAME EXTRA -- (log NAME start, its wall time in ms)`.
fn spawn_logged(ctx: &Ctx, name: &str, key: &str, extra: &[&str]) -> common::Proc {
    let script =
        format!(r#"echo "{name} start" >> "$TEST_DIR/log"; date +%s%3N > "$TEST_DIR/{name}.at""#);
    let mut args = vec!["run", key, "--context", name];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    ctx.baton(args).name(name).spawn()
}

fn pause(ctx: &Ctx, args: &[&str]) -> Value {
    let mut all = vec!["pause", "--json", "--by", "alice@ops"];
    all.extend_from_slice(args);
    let done = ctx.baton(all).run_within(PROMPT);
    done.assert_code(0);
    serde_json::from_str(done.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", done.stdout))
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn ms_of(rfc3339: &Value) -> u64 {
    let text = rfc3339
        .as_str()
        .unwrap_or_else(|| panic!("no time: {rfc3339}"));
    let time = humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[test]
fn a_pause_holds_the_next_waiter_with_its_reason_until_a_resume() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        let mut holder = ctx.spawn_gated("H", &key, &[]);
        ctx.wait_started("H");
        let mut waiter = spawn_logged(ctx, "W", &key, &[]);
        ctx.wait_queued(&key, "W");

        let paused = pause(ctx, &[&key, "--reason", "audit, ask #ops"]);
        assert_eq!(paused["keys"], serde_json::json!([key]), "{paused}");
        assert_eq!(paused["held"], serde_json::json!([key]), "{paused}");

        // The holder finishes its turn; the waiter keeps its place and says why.
        ctx.open_gate("H");
        holder.wait(PROMPT).assert_code(0);
        wait_until("the waiting line to say the key is paused", PROMPT, || {
            waiter
                .stderr()
                .contains("paused until resumed by alice@ops: audit, ask #ops")
        });
        let view = ctx.wait_status("the key to be free and paused", &key, PROMPT, |view| {
            view.holders().is_empty() && !view.raw["paused"].is_null()
        });
        assert_eq!(view.raw["paused"]["reason"], "audit, ask #ops");
        assert_eq!(view.raw["paused"]["by"], "alice@ops");
        assert_eq!(view.raw["paused"]["until"], Value::Null);
        assert_eq!(view.queue_contexts(), ["W"]);
        let table = ctx.baton(["status", &ctx.prefix]).run();
        table.assert_code(0);
        assert!(
            table.stdout.contains("paused") && table.stdout.contains("audit, ask #ops"),
            "the table says the key is paused and why:\n{}",
            table.stdout
        );
        std::thread::sleep(Duration::from_millis(1_500));
        assert!(!waiter.has_exited(), "nobody is granted while paused");
        assert_eq!(ctx.log(), ["H start", "H end"]);

        ctx.baton(["resume", &key, "--by", "bob@ops"])
            .run_within(PROMPT)
            .assert_code(0);
        waiter.wait(PROMPT).assert_code(0);
        assert_eq!(ctx.log(), ["H start", "H end", "W start"]);

        // The log says who paused, when and why, and who resumed.
        let entries = ctx.history(&key);
        let freeze = |word: &str| {
            entries
                .iter()
                .find(|e| e["freeze"] == word)
                .unwrap_or_else(|| panic!("no {word} line: {entries:?}"))
                .clone()
        };
        assert_eq!(freeze("paused")["by"], "alice@ops");
        assert_eq!(freeze("paused")["reason"], "audit, ask #ops");
        assert_eq!(freeze("resumed")["by"], "bob@ops");
        assert!(ms_of(&freeze("resumed")["at"]) >= ms_of(&freeze("paused")["at"]));
        let table = ctx.baton(["log", &key]).run();
        assert!(
            table.stdout.contains("paused") && table.stdout.contains("alice@ops"),
            "{}",
            table.stdout
        );
        let now = ctx.key_view(&key);
        assert_eq!(now.raw["paused"], Value::Null, "{}", now.raw);
    });
}

#[test]
fn a_scheduled_window_starts_and_ends_by_itself() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        // Before the window: granted at once. Six seconds before it opens, for the pause's
        // answer and A's whole run (with three, a loaded CI machine ran A late, into the
        // window, and W came after it had closed).
        let paused = pause(
            ctx,
            &[
                &key,
                "--reason",
                "maintenance",
                "--from",
                "6s",
                // Six seconds open: the waiter starts, says so, and the status is read inside
                // it; with two, a loaded machine read a status whose window had closed.
                "--until",
                "12s",
            ],
        );
        let (from, until) = (
            ms_of(&paused["paused"]["from"]),
            ms_of(&paused["paused"]["until"]),
        );
        assert!(
            wall_ms() < from,
            "pause returned before its window: {paused}"
        );
        spawn_logged(ctx, "A", &key, &[])
            .wait(PROMPT)
            .assert_code(0);

        // Inside it: the waiter waits, saying until when, and is granted when it closes.
        let open_in = from.saturating_sub(wall_ms()) + 300;
        std::thread::sleep(Duration::from_millis(open_in));
        let mut waiter = spawn_logged(ctx, "W", &key, &[]);
        wait_until("the waiting line to say until when", PROMPT, || {
            waiter.stderr().contains("by alice@ops: maintenance")
        });
        let view = ctx.key_view(&key);
        assert_eq!(ms_of(&view.raw["paused"]["until"]), until, "{}", view.raw);
        waiter.wait(PROMPT).assert_code(0);
        let started: u64 = ctx.read("W.at").trim().parse().expect("W's start time");
        assert!(
            started >= until,
            "W started at {started}, before the window closed at {until}"
        );
        assert_eq!(ctx.log(), ["A start", "W start"]);
    });
}

#[test]
fn an_override_is_granted_in_its_turn_and_recorded_with_its_reason() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        spawn_logged(ctx, "first", &key, &[])
            .wait(PROMPT)
            .assert_code(0);
        pause(ctx, &[&key, "--reason", "release freeze"]);
        let mut a = ctx.spawn_gated("A", &key, &[]);
        ctx.wait_queued(&key, "A");
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(ctx.log(), ["first start"], "nobody is granted while paused");
        let mut hotfix = spawn_logged(ctx, "O", &key, &["--override-freeze", "hotfix INC-42"]);

        // The queue up to the override goes, in order: A, queued before it, first.
        ctx.wait_started("A");
        ctx.wait_queued(&key, "O");
        let mut b = spawn_logged(ctx, "B", &key, &[]);
        ctx.wait_queued(&key, "B");
        let view = ctx.key_view(&key);
        assert_eq!(view.queue_contexts(), ["O", "B"], "{}", view.raw);
        ctx.open_gate("A");
        a.wait(PROMPT).assert_code(0);
        hotfix.wait(PROMPT).assert_code(0);
        assert_eq!(ctx.log(), ["first start", "A start", "A end", "O start"]);
        std::thread::sleep(Duration::from_millis(1_000));
        assert!(!b.has_exited(), "behind the override, the freeze holds");
        let entries = ctx.history(&key);
        let o = entries
            .iter()
            .find(|e| e["context"] == "O")
            .unwrap_or_else(|| panic!("no entry of O: {entries:?}"));
        assert_eq!(o["override_freeze"], "hotfix INC-42");
        let table = ctx.baton(["log", &key]).run();
        assert!(
            table
                .stdout
                .contains("granted through a freeze: hotfix INC-42"),
            "{}",
            table.stdout
        );

        ctx.baton(["resume", &key])
            .run_within(PROMPT)
            .assert_code(0);
        b.wait(PROMPT).assert_code(0);
        assert_eq!(
            ctx.log(),
            ["first start", "A start", "A end", "O start", "B start"]
        );
    });
}

#[test]
fn a_prefix_freeze_is_listed_and_wrong_resumes_say_what_to_resume() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("deploy/prod");
        spawn_logged(ctx, "first", &key, &[])
            .wait(PROMPT)
            .assert_code(0);
        let prefix = ctx.key("deploy/");
        pause(
            ctx,
            &[
                &prefix,
                "--reason",
                "no Friday deploys",
                "--weekly",
                "fri 16:00..mon 08:00 +01:00",
            ],
        );
        let list = ctx.baton(["pause", "--list", "--json"]).run();
        list.assert_code(0);
        let freezes: Vec<Value> = list
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(freezes.len(), 1, "{}", list.stdout);
        assert_eq!(freezes[0]["target"], prefix.as_str());
        assert_eq!(freezes[0]["weekly"], "fri 16:00..mon 08:00 +01:00");
        assert!(freezes[0]["next_start"].is_string(), "{}", freezes[0]);

        // Covered by the prefix, not set on the key itself: named, exit 3.
        let wrong = ctx.baton(["resume", &key]).run();
        wrong.assert_code(3);
        assert!(
            wrong.stderr.contains(&prefix) && wrong.stderr.contains("resume that target"),
            "{}",
            wrong.describe()
        );
        ctx.baton(["resume", &ctx.key("elsewhere")])
            .run()
            .assert_code(3);
        ctx.baton(["resume", &prefix])
            .run_within(PROMPT)
            .assert_code(0);
        let empty = ctx.baton(["pause", "--list"]).run();
        empty.assert_code(0);
        assert!(
            empty.stderr.contains("nothing is paused"),
            "{}",
            empty.describe()
        );

        for bad in [
            vec!["pause", &key],
            vec!["pause", &key, "--reason", " "],
            vec!["pause", "/", "--reason", "x"],
            vec!["pause", &key, "--reason", "x", "--weekly", "friday evening"],
            vec!["pause", &key, "--reason", "x", "--until", "yesterday"],
            vec![
                "pause", &key, "--reason", "x", "--from", "2h", "--until", "1h",
            ],
            vec![
                "pause",
                &key,
                "--reason",
                "x",
                "--until",
                "2001-01-01T00:00:00Z",
            ],
        ] {
            let done = ctx.baton(&bad).run();
            done.assert_refused(&[2]);
            done.assert_no_panic();
        }
    });
}

#[test]
fn a_worker_claims_no_job_on_a_paused_key_until_it_is_resumed() {
    for_each_store(|ctx| {
        let key = ctx.key("jobs");
        pause(ctx, &[&key, "--reason", "audit"]);
        let id = {
            let done = ctx.baton(["submit", &key, "--id", "deploy-1"]).run();
            done.assert_code(0);
            done.stdout.trim().to_owned()
        };
        let script = r#"echo "job $BATON_JOB_ID" >> "$TEST_DIR/log""#;
        let mut worker = ctx
            .baton(["worker", "--poll", "100ms", &key, "--", "sh", "-c", script])
            .name("worker")
            .spawn();
        std::thread::sleep(Duration::from_millis(1_500));
        assert!(!ctx.exists("log"), "no job runs on a paused key");
        let why = ctx.baton(["why", &key, &id]).run();
        why.assert_code(0);
        assert!(
            why.stdout.contains("the key is paused") && why.stdout.contains("audit"),
            "{}",
            why.describe()
        );
        ctx.baton(["resume", &key])
            .run_within(PROMPT)
            .assert_code(0);
        wait_until("the job to run after the resume", PROMPT, || {
            ctx.exists("log") && ctx.log() == [format!("job {id}")]
        });
        common::send_signal(worker.pid(), libc::SIGTERM);
        worker.wait(PROMPT).assert_code(0);
    });
}
