//! What the tests of the CI integrations that hold a turn for a whole job (the GitLab template,
//! the Buildkite plugin) share: the stores they run on, a `baton` on PATH, the job's work as a
//! gate the test opens, and what a key's history says of the turns.

use std::path::PathBuf;

use crate::{baton_bin, wait_for, with_fresh_sqlite, with_store, Ctx, PROMPT};

/// Runs `test` on a fresh SQLite store and, when the test servers run, on S3 (moto): the store
/// with a clock, and one judged on the `Date` of its answers (whole seconds).
pub fn on_sqlite_and_s3(test: impl Fn(&Ctx)) {
    eprintln!("--- store: a fresh SQLite file");
    with_fresh_sqlite(&test);
    match std::env::var("BATON_TEST_S3_URL") {
        Ok(url) if !url.is_empty() => {
            eprintln!("--- store: {url}");
            with_store(&url, &test);
        }
        _ => eprintln!("--- S3 not tested: BATON_TEST_S3_URL is not set (scripts/test.sh sets it)"),
    }
}

/// A directory holding only `baton`, a link to the binary under test, to put first on a job's
/// PATH.
pub fn baton_bin_dir(ctx: &Ctx) -> PathBuf {
    let dir = ctx.path("bin");
    if !dir.exists() {
        std::fs::create_dir_all(&dir).expect("create the bin directory");
        std::os::unix::fs::symlink(baton_bin(), dir.join("baton"))
            .expect("link baton into the bin directory");
    }
    dir
}

/// `dir` (if any) before the test's own PATH, which has no `baton`.
pub fn path_with(dir: Option<&std::path::Path>) -> String {
    let outer = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    match dir {
        Some(dir) => format!("{}:{outer}", dir.display()),
        None => outer,
    }
}

/// Fails unless the test's own PATH has no `baton`: the tests of installing baton need one
/// without.
pub fn assert_no_baton_on_path() {
    let on_path = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("baton"))
        .find(|candidate| candidate.exists());
    assert!(
        on_path.is_none(),
        "this test needs a PATH without baton, and found {on_path:?}"
    );
}

/// Takes `key` for two minutes as someone outside the CI, named `context`.
pub fn hold_as(ctx: &Ctx, key: &str, context: &str) {
    ctx.baton(["acquire", key, "--ttl", "2m", "--context", context])
        .run()
        .assert_code(0);
}

/// Shell lines for a job's work named `name`: they write the `BATON_FENCE` and `BATON_KEY` the
/// integration handed them to `NAME.fence` and `NAME.key`, create `NAME.started`, wait until
/// [`finish_work`] writes `NAME.go`, and exit with the code it holds.
pub fn gated_work(name: &str) -> Vec<String> {
    vec![
        format!(r#"echo "$BATON_FENCE" >"$TEST_DIR/{name}.fence""#),
        format!(r#"echo "$BATON_KEY" >"$TEST_DIR/{name}.key""#),
        format!(r#"touch "$TEST_DIR/{name}.started""#),
        format!(r#"while [ ! -s "$TEST_DIR/{name}.go" ]; do sleep 0.05; done"#),
        format!(r#"exit "$(cat "$TEST_DIR/{name}.go")""#),
    ]
}

/// Lets the work named `name` end with exit code `code`.
pub fn finish_work(ctx: &Ctx, name: &str, code: i32) {
    std::fs::write(ctx.path(&format!("{name}.go")), format!("{code}\n")).expect("write the gate");
}

/// Waits until the work named `name` has started; the fence it was handed.
pub fn wait_work_started(ctx: &Ctx, name: &str) -> u64 {
    ctx.wait_file(&format!("{name}.started"), PROMPT);
    ctx.read(&format!("{name}.fence"))
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name} was handed no numeric BATON_FENCE"))
}

/// Waits until the holder `holder` of `key` has held it for `held_ms`, failing the test as soon
/// as it holds it no longer or `waiting` is no longer queued behind it: a turn kept alive across
/// several leases, with the next job waiting all along.
pub fn wait_held_for(ctx: &Ctx, key: &str, holder: &str, waiting: &str, held_ms: u64) {
    let timeout = PROMPT + std::time::Duration::from_millis(held_ms);
    ctx.wait_status(
        &format!("{holder} held for {held_ms} ms"),
        key,
        timeout,
        |view| {
            let holders = view.holders();
            assert!(
                holders.len() == 1 && holders[0].context == holder,
                "{holder} no longer holds {key}: {}",
                view.raw
            );
            assert!(
                view.queue_contexts() == [waiting],
                "{waiting} is no longer queued: {}",
                view.raw
            );
            holders[0].raw["held_ms"].as_u64().unwrap_or(0) >= held_ms
        },
    );
}

/// The `keeper pid N` that a job's log names (the keeper `baton acquire --keep-alive` started).
pub fn keeper_pid(log: &str) -> i32 {
    log.split("keeper pid ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no `keeper pid N` in the job's log:\n{log}"))
}

/// Waits until the keeper `pid` has ended (it looks every 2 s whether its turn still holds).
pub fn wait_keeper_gone(pid: i32) {
    wait_for(&format!("keeper {pid} to end"), PROMPT, || {
        (!crate::pid_alive(pid)).then_some(())
    });
}

/// Each finished turn of `key` as (outcome, context), newest first.
pub fn turns(ctx: &Ctx, key: &str) -> Vec<(String, String)> {
    ctx.history(key)
        .iter()
        .filter(|entry| entry.get("outcome").is_some())
        .map(|entry| {
            let text = |field: &str| entry[field].as_str().unwrap_or("?").to_owned();
            (text("outcome"), text("context"))
        })
        .collect()
}

/// Fails unless the job's log (its stdout or stderr) says `text`.
pub fn assert_said(done: &crate::Done, text: &str) {
    assert!(
        done.stdout.contains(text) || done.stderr.contains(text),
        "the job's log should say {text:?}:\n{}",
        done.describe()
    );
}
