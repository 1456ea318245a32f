//! `baton kv` with real processes on every store: compare-and-swap increments from many
//! processes lose no update, the exit codes (3 missing, 4 a lost CAS or an older fence, 2 bad
//! input with nothing written), expiry, and a holder paused past its lease that cannot overwrite
//! what its successor wrote.
#![allow(clippy::unwrap_used)]

use baton_testkit as common;

use std::time::Duration;

use common::{for_each_store, wait_until, Ctx, PROMPT};
use serde_json::Value;

fn get(ctx: &Ctx, name: &str) -> String {
    let done = ctx.baton(["kv", "get", name]).run();
    done.assert_code(0);
    done.stdout.trim_end_matches('\n').to_owned()
}

fn get_json(ctx: &Ctx, name: &str) -> Value {
    let done = ctx.baton(["kv", "get", "--json", name]).run();
    done.assert_code(0);
    serde_json::from_str(&done.stdout).expect("one JSON object")
}

fn set(ctx: &Ctx, name: &str, value: &str, flags: &[&str]) -> common::Done {
    let mut args = vec!["kv", "set", name, value];
    args.extend_from_slice(flags);
    ctx.baton(args).run()
}

#[test]
fn many_processes_incrementing_by_compare_and_swap_lose_no_update() {
    const PROCESSES: usize = 5;
    const INCREMENTS: usize = 8;
    for_each_store(|ctx| {
        let name = ctx.key("counter");
        set(ctx, &name, "0", &[]).assert_code(0);
        // The value is the count and each write adds one version, so version = value + 1: a
        // process reads the value and writes value + 1 only if nobody wrote in between.
        let script = format!(
            "i=0; while [ $i -lt {INCREMENTS} ]; do \
               v=$(\"$TEST_BATON\" kv get {name}) || exit 9; \
               \"$TEST_BATON\" kv set {name} $((v+1)) --if-version $((v+1)) >/dev/null 2>\"$TEST_DIR/err.$$\"; \
               rc=$?; \
               if [ $rc -eq 0 ]; then i=$((i+1)); elif [ $rc -ne 4 ]; then cat \"$TEST_DIR/err.$$\" >&2; exit $rc; fi; \
             done"
        );
        let procs: Vec<_> = (0..PROCESSES)
            .map(|n| ctx.sh(&format!("incr{n}"), &script).spawn())
            .collect();
        for mut proc in procs {
            proc.wait(Duration::from_secs(240)).assert_code(0);
        }
        assert_eq!(get(ctx, &name), (PROCESSES * INCREMENTS).to_string());
        let json = get_json(ctx, &name);
        assert_eq!(json["version"], (PROCESSES * INCREMENTS + 1) as u64);
    });
}

#[test]
fn set_get_del_and_ls_say_what_happened_with_their_exit_codes() {
    for_each_store(|ctx| {
        let name = ctx.key("ci/version");
        set(ctx, &name, "1.4.2", &["--context", "build #7"]).assert_code(0);
        assert_eq!(get(ctx, &name), "1.4.2");
        let done = set(ctx, &name, "1.5.0", &[]);
        done.assert_code(0);
        assert_eq!(done.stdout.trim(), "2", "set prints the new version");

        // A lost compare-and-swap: exit 4, the current version on stderr, nothing written.
        let lost = set(ctx, &name, "x", &["--if-version", "1"]);
        lost.assert_code(4);
        assert!(
            lost.stderr.contains("current version is 2"),
            "{}",
            lost.describe()
        );
        set(ctx, &name, "x", &["--if-absent"]).assert_code(4);
        assert_eq!(get(ctx, &name), "1.5.0");
        set(ctx, &name, "1.6.0", &["--if-version", "2"]).assert_code(0);

        // Listing: one JSON object per line with the promised fields.
        let other = ctx.key("ci/other");
        set(ctx, &other, "{\"a\": 1}", &["--json", "--context", "job 2"]).assert_code(0);
        let ls = ctx.baton(["kv", "ls", &ctx.key("ci/"), "--json"]).run();
        ls.assert_code(0);
        let rows: Vec<Value> = ls
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 2, "{}", ls.describe());
        assert_eq!(rows[0]["name"], other.as_str());
        assert_eq!(rows[0]["context"], "job 2");
        assert_eq!(rows[1]["name"], name.as_str());
        assert_eq!(rows[1]["version"], 3);
        assert_eq!(rows[1]["size"], 5);
        assert!(rows[1]["expires_at"].is_null());
        let table = ctx.baton(["kv", "ls", &ctx.key("ci/")]).run();
        table.assert_code(0);
        assert!(table.stdout.contains("NAME") && table.stdout.contains(&name));
        // A JSON value comes back as JSON.
        assert_eq!(get_json(ctx, &other)["value"]["a"], 1);

        // Values are not keys: status shows none of them.
        let status = ctx.status();
        let keys = status["keys"].as_array().cloned().unwrap_or_default();
        assert!(keys
            .iter()
            .all(|k| !k["key"].as_str().unwrap_or("").contains("ci/")));

        // Delete; then get and del say missing (3).
        ctx.baton(["kv", "del", &name, "--if-version", "1"])
            .run()
            .assert_code(4);
        ctx.baton(["kv", "del", &name]).run().assert_code(0);
        let missing = ctx.baton(["kv", "get", &name]).run();
        missing.assert_code(3);
        assert!(missing.stderr.contains("no such value"));
        ctx.baton(["kv", "del", &name]).run().assert_code(3);
        // A new value after a delete continues the versions (a stale --if-version never matches).
        assert_eq!(set(ctx, &name, "2.0", &["--if-absent"]).stdout.trim(), "5");
    });
}

#[test]
fn bad_input_is_refused_with_2_and_nothing_written() {
    for_each_store(|ctx| {
        let name = ctx.key("v");
        set(ctx, &name, "{oops", &["--json"]).assert_refused(&[2]);
        set(ctx, "", "x", &[]).assert_refused(&[2]);
        set(ctx, "bad\u{7}name", "x", &[]).assert_refused(&[2]);
        set(ctx, &name, "x", &["--ttl", "soon"]).assert_refused(&[2]);
        set(ctx, &name, "x", &["--if-version", "1", "--if-absent"]).assert_refused(&[2]);
        // The limit is 64 KiB: exactly that is taken, one byte more is refused, from stdin too.
        let big = ctx
            .sh(
                "big",
                &format!("head -c 65537 /dev/zero | tr '\\0' a | \"$TEST_BATON\" kv set {name} -"),
            )
            .run();
        big.assert_refused(&[2]);
        assert!(big.stderr.contains("64 KiB"), "{}", big.describe());
        ctx.baton(["kv", "get", &name]).run().assert_code(3);
        let fits = ctx
            .sh(
                "fits",
                &format!("head -c 65536 /dev/zero | tr '\\0' a | \"$TEST_BATON\" kv set {name} -"),
            )
            .run();
        fits.assert_code(0);
        assert_eq!(get(ctx, &name).len(), 65536);
        // stdin keeps the value as given (here with its newline).
        ctx.sh(
            "stdin",
            &format!("printf 'line one\\nline two\\n' | \"$TEST_BATON\" kv set {name} -"),
        )
        .run()
        .assert_code(0);
        assert_eq!(get_json(ctx, &name)["value"], "line one\nline two\n");
    });
}

#[test]
fn a_value_expires_after_its_ttl() {
    for_each_store(|ctx| {
        let name = ctx.key("lease/marker");
        // Long enough for the set, a get and a get --json, three processes each, on a loaded CI
        // machine, before it ends.
        set(ctx, &name, "here", &["--ttl", "6s"]).assert_code(0);
        assert_eq!(get(ctx, &name), "here");
        let expires = get_json(ctx, &name)["expires_at"].clone();
        assert!(expires.is_string(), "expires_at: {expires}");
        wait_until("the value expires", PROMPT, || {
            ctx.baton(["kv", "get", &name]).run().code == Some(3)
        });
        let ls = ctx.baton(["kv", "ls", &name, "--json"]).run();
        assert_eq!(ls.stdout, "", "an expired value is not listed");
        // An expired value is absent: --if-absent takes its place.
        set(ctx, &name, "again", &["--if-absent"]).assert_code(0);
        assert_eq!(get(ctx, &name), "again");
    });
}

#[test]
fn a_holder_paused_past_its_lease_cannot_overwrite_what_its_successor_wrote() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy/prod");
        let name = ctx.key("deploy/prod/version");
        let acquire = |context: &str| -> u64 {
            let done = ctx
                .baton([
                    "acquire",
                    "--json",
                    "--ttl",
                    "1s",
                    "--poll",
                    "100ms",
                    "--context",
                    context,
                    &key,
                ])
                .run_within(PROMPT);
            done.assert_code(0);
            let json: Value = serde_json::from_str(&done.stdout).expect("acquire --json");
            json["fence"].as_u64().expect("a fence")
        };
        // The first holder writes, then "pauses": it never renews, so its lease runs out.
        let first = acquire("first");
        set(ctx, &name, "v1", &["--fence", &first.to_string()]).assert_code(0);
        // Its successor is granted once the lease has run out, with a higher fence.
        let second = acquire("second");
        assert!(second > first);
        set(ctx, &name, "v2", &["--fence", &second.to_string()]).assert_code(0);
        // The first holder wakes up and writes with its old fence: refused, v2 stays.
        let late = set(ctx, &name, "v1-late", &["--fence", &first.to_string()]);
        late.assert_code(4);
        assert!(
            late.stderr.contains("older than fence"),
            "{}",
            late.describe()
        );
        ctx.baton(["kv", "del", &name, "--fence", &first.to_string()])
            .run()
            .assert_code(4);
        assert_eq!(get(ctx, &name), "v2");
        assert_eq!(get_json(ctx, &name)["fence"], second);
    });
}
