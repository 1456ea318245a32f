//! Jobs with real processes on every store: `baton submit`, `baton worker`, `baton wait`,
//! `baton complete`, `baton retry`.
//!
//! Workers' commands append `start KEY ID` and `end KEY ID` lines to one log (each line one
//! `write` of a short string with `O_APPEND`, so lines never interleave); the order of those
//! lines is the order things happened in.

use baton_testkit as common;

use std::time::Duration;

use common::{for_each_store, wait_until, Ctx, PROMPT};

/// A worker command: logs its start, sleeps `secs`, logs its end, exits `code`.
fn logging_job(secs: &str, code: i32) -> String {
    format!(
        "echo \"start $BATON_KEY $BATON_JOB_ID\" >> \"$TEST_DIR/log\"; sleep {secs}; \
         echo \"end $BATON_KEY $BATON_JOB_ID\" >> \"$TEST_DIR/log\"; exit {code}"
    )
}

fn submit(ctx: &Ctx, key: &str, extra: &[&str]) -> String {
    let mut args = vec!["submit", key];
    args.extend_from_slice(extra);
    let done = ctx.baton(args).run();
    done.assert_code(0);
    done.stdout.trim().to_owned()
}

fn worker(ctx: &Ctx, name: &str, extra: &[&str], script: &str) -> common::Proc {
    let mut args = vec!["worker", "--poll", "100ms"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    ctx.baton(args).name(name).spawn()
}

/// Stops a worker as an operator would (SIGTERM: it lets running jobs finish) and checks it
/// exited 0.
fn stop(proc: &mut common::Proc) {
    common::send_signal(proc.pid(), libc::SIGTERM);
    proc.wait(PROMPT).assert_code(0);
}

fn log_index(lines: &[String], line: &str) -> usize {
    lines
        .iter()
        .position(|l| l == line)
        .unwrap_or_else(|| panic!("no `{line}` in the log:\n{}", lines.join("\n")))
}

#[test]
fn a_busy_key_never_delays_a_free_one_and_one_key_runs_in_submit_order() {
    for_each_store(|ctx| {
        let (a, b) = (ctx.key("env/a"), ctx.key("env/b"));
        let a1 = submit(ctx, &a, &[]);
        let a2 = submit(ctx, &a, &[]);
        let b1 = submit(ctx, &b, &[]);
        let prefix = ctx.key("env/");
        let mut w1 = worker(ctx, "w1", &[&prefix], &logging_job("1", 0));
        let mut w2 = worker(ctx, "w2", &[&prefix], &logging_job("1", 0));
        for id in [&a1, &a2, &b1] {
            let key = if id == &b1 { &b } else { &a };
            ctx.baton(["wait", key.as_str(), id.as_str()])
                .run()
                .assert_code(0);
        }
        stop(&mut w1);
        stop(&mut w2);
        let log = ctx.lines("log");
        let at = |what: &str, key: &str, id: &str| log_index(&log, &format!("{what} {key} {id}"));
        assert!(
            at("start", &b, &b1) < at("end", &a, &a1),
            "B ran while A's first ran:\n{}",
            log.join("\n")
        );
        assert!(
            at("end", &a, &a1) < at("start", &a, &a2),
            "A's two never overlap, in submit order:\n{}",
            log.join("\n")
        );
        assert_eq!(log.len(), 6, "each job ran once:\n{}", log.join("\n"));
    });
}

/// Item 5's fairness with real processes: one key with a backlog delays a job submitted for
/// another key by one run of the worker's slot at most, not by the backlog.
#[test]
fn a_key_with_a_backlog_delays_another_key_by_one_run_at_most() {
    for_each_store(|ctx| {
        let (hot, cold) = (ctx.key("env/hot"), ctx.key("env/cold"));
        for _ in 0..8 {
            submit(ctx, &hot, &[]);
        }
        let prefix = ctx.key("env/");
        // Hot jobs of a second: the mark is written before `submit` starts, and a loaded
        // machine may take a few hundred milliseconds to start it and land its write; a hot
        // job that starts meanwhile counts against the rule, so each must outlast that.
        let mut w = worker(ctx, "w", &[&prefix], &logging_job("1", 0));
        let hot_lines = |ctx: &Ctx, what: &str| {
            let head = format!("{what} {hot} ");
            ctx.lines("log")
                .iter()
                .filter(|l| l.starts_with(&head))
                .count()
        };
        wait_until("two hot jobs done", PROMPT, || hot_lines(ctx, "end") >= 2);
        // Marked in the jobs' log, one append as theirs are, just before the submit.
        append_line(&ctx.path("log"), "submitting cold");
        let cold_id = submit(ctx, &cold, &[]);
        ctx.baton(["wait", cold.as_str(), cold_id.as_str()])
            .run()
            .assert_code(0);
        stop(&mut w);
        let log = ctx.lines("log");
        let marked = log_index(&log, "submitting cold");
        let cold_started = log_index(&log, &format!("start {cold} {cold_id}"));
        let hot_head = format!("start {hot} ");
        let hot_runs_between = log[marked..cold_started]
            .iter()
            .filter(|l| l.starts_with(&hot_head))
            .count();
        assert!(
            hot_runs_between <= 1,
            "{hot_runs_between} hot jobs started between the cold submit and the cold job:\n{}",
            log.join("\n")
        );
        assert!(
            hot_lines(ctx, "start") < 8,
            "the cold job waited for the whole backlog:\n{}",
            log.join("\n")
        );
    });
}

/// Appends `line` to the file at `path` in one write, as the jobs' `>>` does.
fn append_line(path: &std::path::Path, line: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .expect("the log opens for appending");
    file.write_all(format!("{line}\n").as_bytes())
        .expect("the line is appended");
}

/// `--not-before` as a duration holds the job (`why` says until when, `jobs --json` gives its
/// `ready_at`); as an RFC 3339 time already past, the job runs at once.
#[test]
fn not_before_holds_a_job_until_its_time() {
    for_each_store(|ctx| {
        let key = ctx.key("later");
        let later = submit(ctx, &key, &["--not-before", "1h"]);
        let why = ctx.baton(["why", key.as_str(), later.as_str()]).run();
        why.assert_code(0);
        assert!(
            why.stdout.contains("not before its --not-before: ready at"),
            "{}",
            why.describe()
        );
        let listed = ctx.baton(["jobs", key.as_str(), "--json"]).run();
        listed.assert_code(0);
        let row: serde_json::Value =
            serde_json::from_str(listed.stdout.trim()).expect("one JSON row");
        assert_eq!(row["state"], "queued", "{}", listed.describe());
        assert!(row["ready_at"].is_string(), "{}", listed.describe());
        let now_key = ctx.key("now");
        let past = submit(ctx, &now_key, &["--not-before", "2020-01-01T00:00:00Z"]);
        let mut w = worker(ctx, "w", &[&now_key], "true");
        ctx.baton(["wait", now_key.as_str(), past.as_str()])
            .run()
            .assert_code(0);
        stop(&mut w);
    });
}

/// A job submitted with `--supersede` ends the queued jobs before it: `wait` on one of them
/// exits 76 (superseded); the new one, in `baton status` while queued, runs; `baton log` shows
/// both with how they ended.
#[test]
fn a_superseding_submit_ends_the_queued_jobs_and_wait_exits_76() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        let old = submit(ctx, &key, &[]);
        let new = submit(ctx, &key, &["--supersede"]);
        ctx.baton(["wait", key.as_str(), old.as_str()])
            .run()
            .assert_code(76);
        // A queued job is in `baton status`, as a ticket is.
        let status = ctx.baton(["status", key.as_str()]).run();
        status.assert_code(0);
        assert!(status.stdout.contains(&new), "{}", status.describe());
        let mut w = worker(ctx, "w", &[&key], "true");
        ctx.baton(["wait", key.as_str(), new.as_str()])
            .run()
            .assert_code(0);
        stop(&mut w);
        // Both are in `baton log`, with how they ended.
        let log = ctx.baton(["log", key.as_str()]).run();
        log.assert_code(0);
        let line_of = |id: &str| {
            log.stdout
                .lines()
                .find(|l| l.contains(id))
                .unwrap_or_else(|| panic!("{id} is not in the log: {}", log.describe()))
                .to_owned()
        };
        assert!(line_of(&old).contains("superseded"), "{}", log.describe());
        assert!(line_of(&new).contains("succeeded"), "{}", log.describe());
    });
}

#[test]
fn a_failing_job_is_retried_then_dead_and_wait_says_so_with_its_output() {
    for_each_store(|ctx| {
        let key = ctx.key("flaky");
        let id = submit(ctx, &key, &["--max-attempts", "2", "--backoff", "500ms"]);
        let mut w = worker(
            ctx,
            "w",
            &[&key],
            "echo \"attempt $BATON_ATTEMPT\"; echo oops >&2; exit 3",
        );
        let done = ctx.baton(["wait", key.as_str(), id.as_str()]).run();
        done.assert_code(1);
        assert!(done.stdout.contains("attempt 2"), "{}", done.describe());
        assert!(done.stderr.contains("oops"), "{}", done.describe());
        assert!(done.stderr.contains("dead"), "{}", done.describe());
        stop(&mut w);
        // `jobs` lists it as dead with its error; `jobs show` has both runs and their output.
        let prefix = ctx.key("");
        let done = ctx
            .baton(["jobs", "-s", "dead", "--json", prefix.as_str()])
            .run();
        done.assert_code(0);
        let rows: Vec<serde_json::Value> = done
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect();
        assert_eq!(rows.len(), 1, "{}", done.describe());
        assert_eq!(rows[0]["id"], id.as_str());
        assert_eq!(rows[0]["state"], "dead");
        assert_eq!(rows[0]["attempt"], 2);
        assert_eq!(rows[0]["last_error"], "exit 3");
        let done = ctx
            .baton(["jobs", "show", "--json", key.as_str(), id.as_str()])
            .run();
        done.assert_code(0);
        let shown: serde_json::Value = serde_json::from_str(done.stdout.trim()).expect("JSON");
        let runs = shown["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 2, "{shown}");
        assert_eq!(runs[0]["attempt"], 1);
        assert_eq!(runs[1]["exit_code"], 3);
        assert_eq!(runs[1]["stdout_tail"], "attempt 2\n");
        assert_eq!(runs[1]["stderr_tail"], "oops\n");
        // `retry` queues it again, attempts reset.
        ctx.baton(["retry", key.as_str(), id.as_str()])
            .run()
            .assert_code(0);
        let mut w = worker(ctx, "w2", &[&key], "echo \"attempt $BATON_ATTEMPT\"");
        let done = ctx.baton(["wait", key.as_str(), id.as_str()]).run();
        done.assert_code(0);
        assert!(done.stdout.contains("attempt 1"), "{}", done.describe());
        stop(&mut w);
        // The runs before the retry keep their reports; the new one is the third.
        let done = ctx
            .baton(["jobs", "show", "--json", key.as_str(), id.as_str()])
            .run();
        let shown: serde_json::Value = serde_json::from_str(done.stdout.trim()).expect("JSON");
        let runs = shown["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 3, "{shown}");
        assert_eq!(runs[1]["exit_code"], 3, "{shown}");
        assert_eq!(runs[2]["exit_code"], 0, "{shown}");
        assert_eq!(runs[2]["attempt"], 1, "{shown}");
    });
}

#[test]
fn exit_75_releases_the_job_back_without_spending_an_attempt() {
    for_each_store(|ctx| {
        let key = ctx.key("busy");
        let id = submit(ctx, &key, &["--max-attempts", "1"]);
        // The first run asks to be released back; the second succeeds. Attempt stays 1.
        let script = "echo \"run $BATON_ATTEMPT\" >> \"$TEST_DIR/log\"; \
                      if [ ! -e \"$TEST_DIR/once\" ]; then touch \"$TEST_DIR/once\"; exit 75; fi";
        let mut w = worker(ctx, "w", &["--release-delay", "200ms", &key], script);
        ctx.baton(["wait", key.as_str(), id.as_str()])
            .run()
            .assert_code(0);
        stop(&mut w);
        assert_eq!(ctx.lines("log"), ["run 1", "run 1"]);
    });
}

#[test]
fn an_async_job_is_completed_by_another_process_and_refused_a_wrong_token() {
    for_each_store(|ctx| {
        let key = ctx.key("async");
        let id = submit(ctx, &key, &[]);
        let mut w = worker(
            ctx,
            "w",
            &["--async", "--ttl", "30s", &key],
            "printf '%s\\n' \"$BATON_JOB_TOKEN\" > \"$TEST_DIR/token\"",
        );
        let token = ctx.wait_line("token", PROMPT);
        // The job stays held after its command exited 0.
        std::thread::sleep(Duration::from_millis(500));
        let view = ctx.key_view(&key);
        assert_eq!(view.holders().len(), 1, "still running: {}", view.raw);
        ctx.baton([
            "complete",
            key.as_str(),
            id.as_str(),
            "--job-token",
            "0123456789abcdef0123456789abcdef",
        ])
        .run()
        .assert_code(1);
        ctx.baton([
            "complete",
            key.as_str(),
            id.as_str(),
            "--job-token",
            token.as_str(),
        ])
        .run()
        .assert_code(0);
        ctx.baton(["wait", key.as_str(), id.as_str()])
            .run()
            .assert_code(0);
        stop(&mut w);
    });
}

#[test]
fn a_job_past_its_max_run_is_stopped_as_a_failed_attempt() {
    for_each_store(|ctx| {
        let key = ctx.key("slow");
        let id = submit(ctx, &key, &["--max-run", "1s", "--max-attempts", "1"]);
        let mut w = worker(ctx, "w", &[&key], "sleep 60");
        let done = ctx.baton(["wait", key.as_str(), id.as_str()]).run();
        done.assert_code(1);
        assert!(done.stderr.contains("max-run"), "{}", done.describe());
        stop(&mut w);
    });
}

#[test]
fn submit_is_idempotent_by_id_and_refuses_bad_parameters() {
    for_each_store(|ctx| {
        let key = ctx.key("ids");
        let first = submit(ctx, &key, &["--id", "deploy-1", "--params", "{\"v\":1}"]);
        let again = submit(ctx, &key, &["--id", "deploy-1", "--params", "{\"v\":2}"]);
        assert_eq!((first.as_str(), again.as_str()), ("deploy-1", "deploy-1"));
        for bad in ["{bad", "[1,", ""] {
            ctx.baton(["submit", key.as_str(), "--params", bad])
                .run()
                .assert_code(2);
        }
        let big = format!("\"{}\"", "x".repeat(300 * 1024));
        std::fs::write(ctx.path("big.json"), big).expect("write");
        let at_file = format!("@{}", ctx.path("big.json").display());
        let done = ctx
            .baton(["submit", key.as_str(), "--params", at_file.as_str()])
            .run();
        done.assert_code(2);
        assert!(done.stderr.contains("256 KiB"), "{}", done.describe());
        // The parameters reach the command exactly as first submitted, on stdin and in the
        // environment.
        let mut w = worker(
            ctx,
            "w",
            &[&key],
            "cat > \"$TEST_DIR/stdin\"; printf %s \"$BATON_PARAMS\" > \"$TEST_DIR/env\"",
        );
        ctx.baton(["wait", key.as_str(), "deploy-1"])
            .run()
            .assert_code(0);
        stop(&mut w);
        assert_eq!(ctx.read("stdin"), "{\"v\":1}");
        assert_eq!(ctx.read("env"), "{\"v\":1}");
        wait_until("nothing left", PROMPT, || {
            ctx.key_view(&key).holders().is_empty()
        });
    });
}

/// Submits job `id` to `key`, lets a worker run it to success, then ends `turns` other turns
/// of the key (`baton run`), more than the document remembers finished tickets.
fn run_then_turns(ctx: &Ctx, key: &str, id: &str, turns: usize) {
    submit(ctx, key, &["--id", id]);
    let mut w = worker(ctx, "w", &[key], &logging_job("0", 0));
    ctx.baton(["wait", key, id]).run().assert_code(0);
    stop(&mut w);
    for _ in 0..turns {
        ctx.baton(["run", key, "--", "true"]).run().assert_code(0);
    }
}

/// A job id is remembered as long as the key's history holds the job's end, not only while
/// the document's few marks of finished tickets do: a second `submit --id` after more than
/// eight other turns of the key ended answers with the job's end and queues nothing.
#[test]
fn a_second_submit_by_id_after_many_other_turns_queues_nothing() {
    for_each_store(|ctx| {
        let key = ctx.key("ids-later");
        run_then_turns(ctx, &key, "deploy-7", 10);
        let again = ctx
            .baton(["submit", key.as_str(), "--id", "deploy-7", "--json"])
            .run();
        again.assert_code(0);
        let line: serde_json::Value =
            serde_json::from_str(again.stdout.trim()).expect("one JSON line");
        assert_eq!(line["state"], "succeeded", "{}", again.describe());
        assert_eq!(line["already"], true, "{}", again.describe());
        assert!(
            ctx.key_view(&key).queue().is_empty(),
            "nothing queued again: {}",
            ctx.status()
        );
        assert_eq!(
            ctx.log(),
            [
                "start ".to_owned() + &key + " deploy-7",
                "end ".to_owned() + &key + " deploy-7"
            ]
        );
    });
}

/// When the key's history no longer reaches back to a job's end (its retention trimmed it),
/// a second `submit --id` cannot know whether the job ran: it refuses, naming why, and queues
/// nothing.
#[test]
fn a_second_submit_by_id_whose_end_was_trimmed_is_refused() {
    let dir = std::env::temp_dir().join(format!("baton-trim-{}", common::random_hex()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite:{}?history_keep=3", dir.join("baton.db").display());
    common::with_store(&url, |ctx| {
        let key = ctx.key("ids-trimmed");
        run_then_turns(ctx, &key, "deploy-8", 12);
        let again = ctx
            .baton(["submit", key.as_str(), "--id", "deploy-8"])
            .run();
        again.assert_code(1);
        assert!(
            again.stderr.contains("cannot tell whether it ran"),
            "{}",
            again.describe()
        );
        assert!(ctx.key_view(&key).queue().is_empty(), "{}", ctx.status());
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// What each job of the many-workers test does, by its parameters.
const BEHAVIOURS: [&str; 4] = ["ok", "fail-once", "release-once", "fail-always"];

/// The command of the many-workers test: logs `start KEY ID FENCE ATTEMPT WORKER` (the
/// worker's pid: the parent of CMD's supervisor), uses the torture harness's fenced resource (at
/// `resource`) with its fence for 50 ms, then behaves as its parameters say and logs
/// `end KEY ID FENCE` before exiting.
fn many_script(torture: &std::path::Path, resource: &str) -> String {
    format!(
        r#"
read -r params
worker=$(cut -d ' ' -f 4 "/proc/$PPID/stat")
echo "start $BATON_KEY $BATON_JOB_ID $BATON_FENCE $BATON_ATTEMPT $worker" >> "$TEST_DIR/log"
'{torture}' use --resource {resource} --key "$BATON_KEY" --who "w$worker" --hold 50ms
used=$?
code=0
case "$params" in
  *fail-always*) code=3 ;;
  *fail-once*) [ "$BATON_ATTEMPT" = 1 ] && code=3 ;;
  *release-once*) [ -e "$TEST_DIR/released-$BATON_JOB_ID" ] || {{ touch "$TEST_DIR/released-$BATON_JOB_ID"; code=75; }} ;;
esac
[ "$used" = 0 ] || code=4
echo "end $BATON_KEY $BATON_JOB_ID $BATON_FENCE" >> "$TEST_DIR/log"
exit $code
"#,
        torture = torture.display()
    )
}

/// The torture harness's protected resource (`baton-torture resource`), every key a mutex
/// that refuses a write with a fence below the highest it accepted.
struct FencedResource {
    child: std::process::Child,
    address: String,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl FencedResource {
    fn start() -> FencedResource {
        use std::io::BufRead;
        let torture = torture_bin();
        let mut child = std::process::Command::new(&torture)
            .arg("resource")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", torture.display()));
        let stdout = child.stdout.take().expect("piped");
        let mut stdout = std::io::BufReader::new(stdout);
        let mut address = String::new();
        stdout
            .read_line(&mut address)
            .expect("the resource's address");
        FencedResource {
            child,
            address: address.trim().to_owned(),
            stdout,
        }
    }

    /// Stops it and returns its verdict: holds, writes, refused writes, violations.
    fn verdict(mut self) -> serde_json::Value {
        use std::io::Read;
        drop(self.child.stdin.take());
        let mut text = String::new();
        self.stdout.read_to_string(&mut text).expect("the verdict");
        let _ = self.child.wait();
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("verdict {text:?}: {e}"))
    }
}

/// `baton-torture`, built beside `baton` by the workspace build the test command runs first.
fn torture_bin() -> std::path::PathBuf {
    let path = common::baton_bin().with_file_name("baton-torture");
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p baton-torture` (scripts/test.sh builds \
         the whole workspace before testing)",
        path.display()
    );
    path
}

/// 3 workers × many jobs over many keys, with failures, releases back and `kill -9` of
/// workers mid-job: every job ends exactly once, as its behaviour says; no key ever has two
/// runs at once and fences rise; within a key, jobs first start in submit order. The short
/// form runs in the test command; `BATON_JOBS_FULL=1` runs 300 jobs over 30 keys.
#[test]
fn killed_workers_lose_no_job_and_no_key_ever_runs_twice_at_once() {
    // In full (300 jobs over 30 keys, 6 workers killed) on SQLite and PostgreSQL; a short form
    // on the other stores keeps the test command under its time, and `BATON_JOBS_FULL=1` runs
    // the full form everywhere (TORTURE.md).
    let full_everywhere = std::env::var_os("BATON_JOBS_FULL").is_some();
    for_each_store(|ctx| {
        let full = full_everywhere
            || ["sqlite:", "postgres"]
                .iter()
                .any(|s| ctx.store.starts_with(s));
        let (n_jobs, n_keys, n_kills) = if full { (300, 30, 6) } else { (48, 6, 2) };
        let keys: Vec<String> = (0..n_keys).map(|k| ctx.key(&format!("many/{k}"))).collect();
        let mut submitted: Vec<(String, String, &str)> = Vec::new();
        for n in 0..n_jobs {
            let key = &keys[n % n_keys];
            let behaviour = BEHAVIOURS[(n / n_keys) % BEHAVIOURS.len()];
            let attempts = if behaviour == "fail-always" {
                "2"
            } else {
                "10"
            };
            let params = format!("\"{behaviour}\"");
            let id = submit(
                ctx,
                key,
                &[
                    "--params",
                    &params,
                    "--max-attempts",
                    attempts,
                    "--backoff",
                    "200ms",
                ],
            );
            submitted.push((key.clone(), id, behaviour));
        }
        let prefix = ctx.key("many/");
        let resource = FencedResource::start();
        let script = many_script(&torture_bin(), &resource.address);
        let start = |name: &str| {
            worker(
                ctx,
                name,
                &["--ttl", "2s", "--release-delay", "100ms", &prefix],
                &script,
            )
        };
        let mut workers: Vec<common::Proc> = (0..3).map(|i| start(&format!("w{i}"))).collect();
        let mut killed_pids = Vec::new();
        for kill in 0..n_kills {
            // Mid-job: wait for a start line of a worker still alive, then kill -9 that worker.
            let victim = wait_for_running_worker(ctx, &mut workers, &killed_pids);
            common::send_signal(victim, libc::SIGKILL);
            killed_pids.push(victim);
            workers.push(start(&format!("w-after-{kill}")));
        }
        for (key, id, behaviour) in &submitted {
            let done = ctx
                .baton(["wait", "--quiet", key.as_str(), id.as_str()])
                .run_within(Duration::from_secs(120));
            let expected = if *behaviour == "fail-always" { 1 } else { 0 };
            assert_eq!(
                done.code,
                Some(expected),
                "{behaviour}: {}",
                done.describe()
            );
        }
        for proc in workers.iter_mut() {
            if !proc.has_exited() {
                stop(proc);
            }
        }
        let stderr: Vec<String> = workers.iter().map(|w| w.stderr()).collect();
        check_many_log(
            &ctx.lines("log"),
            &submitted,
            &killed_pids,
            &commands_killed(&stderr),
        );
        // The resource itself saw no two holds of a key overlap, fences rise in the order
        // holds began, and no write came with a stale fence.
        let verdict = resource.verdict();
        assert_eq!(verdict["violations"], serde_json::json!([]), "{verdict}");
        assert_eq!(verdict["rejected"], serde_json::json!([]), "{verdict}");
        assert_eq!(verdict["keys"], serde_json::json!(n_keys), "{verdict}");
        assert!(
            verdict["holds"].as_u64().unwrap_or(0) >= n_jobs as u64,
            "a hold per run at least: {verdict}"
        );
        // Every job ended exactly once, nothing is left live.
        let done = ctx
            .baton([
                "jobs",
                "-s",
                "all",
                "--json",
                "-l",
                "100000",
                prefix.as_str(),
            ])
            .run();
        done.assert_code(0);
        let mut ended: Vec<String> = Vec::new();
        for line in done.stdout.lines() {
            let row: serde_json::Value = serde_json::from_str(line).expect("JSON");
            let state = row["state"].as_str().unwrap_or_default();
            assert!(state == "succeeded" || state == "dead", "{row}");
            ended.push(row["id"].as_str().unwrap_or_default().to_owned());
        }
        ended.sort();
        let mut ids: Vec<String> = submitted.iter().map(|(_, id, _)| id.clone()).collect();
        ids.sort();
        assert_eq!(ended, ids, "every job ended exactly once");
    });
}

/// The pid of a live worker whose job's command has logged its start and not its end.
fn wait_for_running_worker(ctx: &Ctx, workers: &mut [common::Proc], killed: &[i32]) -> i32 {
    common::wait_for("a worker mid-job", PROMPT, || {
        let lines = ctx.lines("log");
        let mut open: Vec<(String, i32)> = Vec::new();
        for line in &lines {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["start", _, id, _, _, ppid] => {
                    open.push(((*id).to_owned(), ppid.parse().unwrap_or(0)));
                }
                ["end", _, id, _] => open.retain(|(open_id, _)| open_id != id),
                _ => {}
            }
        }
        let alive: Vec<i32> = workers
            .iter_mut()
            .filter_map(|w| (!w.has_exited()).then(|| w.pid()))
            .collect();
        open.iter()
            .map(|(_, pid)| *pid)
            .find(|pid| alive.contains(pid) && !killed.contains(pid))
    })
}

/// The runs (job id, attempt) whose command a worker killed because it could not renew its
/// lease in time, as the workers' `stderr` says: such a run logs no end.
fn commands_killed(stderr: &[String]) -> Vec<(String, String)> {
    stderr
        .iter()
        .flat_map(|text| text.lines())
        .filter(|line| line.contains(": lease lost, command killed"))
        .filter_map(|line| {
            // `baton: KEY ID attempt N: lease lost, command killed: …`
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["baton:", _key, id, "attempt", attempt, ..] => {
                    Some(((*id).to_owned(), attempt.trim_end_matches(':').to_owned()))
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
fn a_command_killed_for_a_lost_lease_is_read_from_the_workers_stderr() {
    let stderr = [
        "baton: t1/many/5 j-5a29 attempt 1: queued again after 206ms, next attempt 2 (exit 3)\n\
         baton: t1/many/5 j-5a29 attempt 2: lease lost, command killed: could not renew the \
         lease in time (was this process paused or suspended, or the store unreachable?)\n"
            .to_owned(),
        "baton: t1/many/2 j-77 attempt 1: succeeded after 611ms\n".to_owned(),
    ];
    assert_eq!(
        commands_killed(&stderr),
        [("j-5a29".to_owned(), "2".to_owned())]
    );
}

/// Checks the run log: per key, runs never overlap (a run's end comes before the next start,
/// unless its worker was killed, or its command was, for a lease the worker could not renew:
/// the fenced resource checks those runs' holds) and fences rise; jobs first start in submit
/// order; a `fail-once` job succeeds at attempt 2 or later.
fn check_many_log(
    lines: &[String],
    submitted: &[(String, String, &str)],
    killed: &[i32],
    commands_killed: &[(String, String)],
) {
    use std::collections::HashMap;
    let text = || lines.join("\n");
    // key -> (the run going on: id, attempt, worker pid), last fence, jobs in first-start order
    let mut open: HashMap<&str, (String, String, i32)> = HashMap::new();
    let mut last_fence: HashMap<&str, u64> = HashMap::new();
    let mut first_starts: HashMap<&str, Vec<String>> = HashMap::new();
    for line in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["start", key, id, fence, attempt, ppid] => {
                let fence: u64 = fence.parse().expect("fence");
                let ppid: i32 = ppid.parse().expect("ppid");
                if let Some((other, other_attempt, pid)) = open.get(key) {
                    let lost = (other.clone(), other_attempt.clone());
                    assert!(
                        killed.contains(pid) || commands_killed.contains(&lost),
                        "{key}: {id} started while {other} ran:\n{}",
                        text()
                    );
                }
                let last = last_fence.insert(key, fence).unwrap_or(0);
                assert!(
                    fence > last,
                    "{key}: fence {fence} after {last}:\n{}",
                    text()
                );
                open.insert(key, ((*id).to_owned(), (*attempt).to_owned(), ppid));
                let order = first_starts.entry(key).or_default();
                if !order.iter().any(|seen| seen == id) {
                    order.push((*id).to_owned());
                }
            }
            ["end", key, id, _] => {
                if open.get(key).is_some_and(|(open_id, _, _)| open_id == id) {
                    open.remove(key);
                }
            }
            _ => panic!("a line the test did not write: {line}"),
        }
    }
    for (key, order) in first_starts {
        let submitted_order: Vec<&String> = submitted
            .iter()
            .filter(|(k, _, _)| k == key)
            .map(|(_, id, _)| id)
            .collect();
        let started: Vec<&String> = order.iter().collect();
        assert_eq!(
            started, submitted_order,
            "{key}: first starts in submit order"
        );
    }
}

#[test]
fn why_says_what_a_job_waits_for() {
    for_each_store(|ctx| {
        let key = ctx.key("why");
        // A turn of `baton acquire` holds the key; the job waits behind it with no worker.
        let token = ctx.baton(["acquire", "--ttl", "5m", key.as_str()]).run();
        token.assert_code(0);
        let id = submit(ctx, &key, &["--max-attempts", "3", "--backoff", "1h"]);
        let done = ctx.baton(["why", key.as_str(), id.as_str()]).run();
        done.assert_code(0);
        assert!(
            done.stdout.contains("queued (attempt 1)"),
            "{}",
            done.describe()
        );
        assert!(
            done.stdout.contains("the key is full: 1 of 1"),
            "{}",
            done.describe()
        );
        assert!(
            done.stdout.contains("no worker has ever served this key"),
            "{}",
            done.describe()
        );
        ctx.baton(["release", key.as_str(), token.stdout.trim()])
            .run()
            .assert_code(0);
        // A worker serves it; its first attempt fails and it backs off for an hour.
        let prefix = ctx.key("");
        let mut w = worker(ctx, "w", &[&prefix], "exit 3");
        wait_until("the first attempt failed", PROMPT, || {
            let done = ctx.baton(["why", key.as_str()]).run();
            done.stdout
                .contains("backing off after a failed attempt (exit 3)")
        });
        let done = ctx.baton(["why", key.as_str(), id.as_str()]).run();
        assert!(
            done.stdout.contains("queued (attempt 2)"),
            "{}",
            done.describe()
        );
        assert!(
            done.stdout.contains("served by worker"),
            "{}",
            done.describe()
        );
        stop(&mut w);
        ctx.baton(["cancel", key.as_str(), id.as_str()])
            .run()
            .assert_code(0);
        let done = ctx.baton(["why", key.as_str(), id.as_str()]).run();
        assert!(
            done.stdout.contains("it has ended, cancelled"),
            "{}",
            done.describe()
        );
    });
}

#[test]
fn an_async_job_whose_lease_runs_out_is_a_failed_attempt() {
    for_each_store(|ctx| {
        let key = ctx.key("async-lapse");
        let id = submit(ctx, &key, &["--max-attempts", "1"]);
        let mut w = worker(ctx, "w", &["--async", "--ttl", "1s", &key], "true");
        let done = ctx
            .baton(["wait", key.as_str(), id.as_str()])
            .run_within(Duration::from_secs(60));
        done.assert_code(1);
        assert!(done.stderr.contains("lease ran out"), "{}", done.describe());
        stop(&mut w);
    });
}

/// What a worker leaves behind when it ran `key`'s next job to exit 0, kept the run's report
/// saying so, and died before the job's end was recorded: a report, and a lease (of 1 s)
/// that runs out. Done through the library, as the worker does it, stopping where it died.
fn claim_report_and_die(ctx: &Ctx, key: &str, awaiting_complete: bool) {
    use baton_client::jobs::{self, ClaimOptions, RunReport};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let coord = baton_client::Coordinator::open(&ctx.store, None)
            .await
            .expect("open the store");
        let coord = std::sync::Arc::new(coord);
        let options = ClaimOptions {
            ttl: Duration::from_secs(1),
        };
        let job = jobs::claim(&coord, key, &options)
            .await
            .expect("claim")
            .expect("a job to claim");
        let now = baton_client::wall_ms();
        let report = RunReport {
            attempt: job.attempt,
            run: job.run,
            fence: job.lease.fence,
            worker: "a worker that died".into(),
            started_wall_ms: now,
            ended_wall_ms: now,
            result: "succeeded".into(),
            exit_code: Some(0),
            error: None,
            stdout_tail: String::new(),
            stderr_tail: String::new(),
            awaiting_complete,
            note: None,
        };
        job.report(&report).await.expect("keep the report");
        job.heartbeat.stop_all();
    });
}

#[test]
fn a_run_that_reported_success_and_died_before_its_end_is_recorded_not_run_again() {
    for_each_store(|ctx| {
        let key = ctx.key("reported");
        let id = submit(ctx, &key, &["--backoff", "100ms"]);
        claim_report_and_die(ctx, &key, false);
        let mut w = worker(ctx, "w", &["--ttl", "2s", &key], "touch \"$TEST_DIR/ran\"");
        let done = ctx
            .baton(["wait", key.as_str(), id.as_str()])
            .run_within(Duration::from_secs(60));
        done.assert_code(0);
        stop(&mut w);
        assert!(
            !ctx.path("ran").exists(),
            "the command ran again after a run had reported its success"
        );
        let shown = ctx
            .baton(["jobs", "show", key.as_str(), id.as_str(), "--json"])
            .run();
        let job: serde_json::Value = serde_json::from_str(&shown.stdout).expect("JSON");
        let results: Vec<&str> = job["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .map(|r| r["result"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(results, ["succeeded", "not run"], "{}", shown.describe());
        let note = job["runs"][1]["note"].as_str().unwrap_or_default();
        assert!(note.contains("run 1"), "{}", shown.describe());
    });
}

/// A claim through the library, for the tests of workers that stop half-way: the runtime and
/// the claimed job (its heartbeat renewing) on `ctx`'s store, with a 1 s lease.
fn claim_by_hand(ctx: &Ctx, key: &str) -> (tokio::runtime::Runtime, baton_client::jobs::Job) {
    use baton_client::jobs::{self, ClaimOptions};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let job = runtime.block_on(async {
        let coord = baton_client::Coordinator::open(&ctx.store, None)
            .await
            .expect("open the store");
        let options = ClaimOptions {
            ttl: Duration::from_secs(1),
        };
        jobs::claim(&std::sync::Arc::new(coord), key, &options)
            .await
            .expect("claim")
            .expect("a job to claim")
    });
    (runtime, job)
}

/// A worker that told the store its command succeeded and stopped before recording the job's
/// end: when the run's lease runs out the job ends succeeded, and no worker runs it again.
#[test]
fn a_run_that_said_it_succeeded_and_died_ends_the_job_succeeded_when_its_lease_runs_out() {
    for_each_store(|ctx| {
        let key = ctx.key("said");
        let id = submit(ctx, &key, &["--backoff", "100ms"]);
        let (runtime, job) = claim_by_hand(ctx, &key);
        let told = runtime.block_on(job.succeeded()).expect("told the store");
        assert!(told, "the run held the job");
        job.heartbeat.stop_all();
        let mut w = worker(ctx, "w", &["--ttl", "2s", &key], "touch \"$TEST_DIR/ran\"");
        let done = ctx
            .baton(["wait", key.as_str(), id.as_str()])
            .run_within(Duration::from_secs(60));
        done.assert_code(0);
        stop(&mut w);
        assert!(!ctx.path("ran").exists(), "the command ran again");
        let end = ctx.history(&key);
        let end = end
            .iter()
            .find(|e| e["outcome"].is_string())
            .expect("its end");
        assert_eq!(end["outcome"], "succeeded", "{end}");
        let reason = end["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("saying its command succeeded"), "{end}");
    });
}

/// A worker paused after its command succeeded, past its lease: the job runs again elsewhere,
/// and the paused worker's success is refused, so no late report can claim it.
#[test]
fn a_success_told_after_the_lease_ran_out_is_refused_and_the_job_runs_once_more() {
    for_each_store(|ctx| {
        let key = ctx.key("late");
        let id = submit(ctx, &key, &["--backoff", "100ms"]);
        let (runtime, job) = claim_by_hand(ctx, &key);
        job.heartbeat.stop_all();
        let mut w = worker(ctx, "w", &["--ttl", "2s", &key], "touch \"$TEST_DIR/ran\"");
        let done = ctx
            .baton(["wait", key.as_str(), id.as_str()])
            .run_within(Duration::from_secs(60));
        done.assert_code(0);
        stop(&mut w);
        assert!(ctx.path("ran").exists(), "{}", done.describe());
        let told = runtime.block_on(job.succeeded()).expect("an answer");
        assert!(!told, "a run whose lease ran out cannot say it succeeded");
    });
}

#[test]
fn an_async_run_that_exited_0_and_was_never_completed_runs_again() {
    // `--async`: exit 0 is not the job's end, `baton complete` is; a lease that ran out
    // before it came is a failed attempt, and the job runs again.
    for_each_store(|ctx| {
        let key = ctx.key("async-reported");
        let id = submit(ctx, &key, &["--backoff", "100ms"]);
        claim_report_and_die(ctx, &key, true);
        let mut w = worker(ctx, "w", &["--ttl", "2s", &key], "touch \"$TEST_DIR/ran\"");
        let done = ctx
            .baton(["wait", key.as_str(), id.as_str()])
            .run_within(Duration::from_secs(60));
        done.assert_code(0);
        stop(&mut w);
        assert!(ctx.path("ran").exists(), "{}", done.describe());
    });
}

#[test]
fn sigterm_lets_a_running_job_finish_and_a_second_one_gives_it_back() {
    for_each_store(|ctx| {
        let key = ctx.key("drain");
        let script = "touch \"$TEST_DIR/started-$BATON_ATTEMPT\"; \
                      while [ ! -e \"$TEST_DIR/go\" ]; do sleep 0.05; done";
        // One signal: no new job is claimed, the running one finishes, the worker exits 0.
        let first = submit(ctx, &key, &[]);
        let second = submit(ctx, &key, &[]);
        let mut w = worker(ctx, "w", &[&key], script);
        ctx.wait_file("started-1", PROMPT);
        common::send_signal(w.pid(), libc::SIGTERM);
        std::thread::sleep(Duration::from_millis(300));
        assert!(!w.has_exited(), "the running job may finish first");
        ctx.touch("go");
        w.wait(PROMPT).assert_code(0);
        ctx.baton(["wait", key.as_str(), first.as_str()])
            .run()
            .assert_code(0);
        let rows = ctx.baton(["jobs", "--json", key.as_str()]).run();
        assert!(
            rows.stdout.contains(&second) && rows.stdout.contains("\"queued\""),
            "the second was not claimed: {}",
            rows.describe()
        );
        // Two signals: the running job is stopped and given back unspent.
        std::fs::remove_file(ctx.path("go")).expect("remove the gate");
        std::fs::remove_file(ctx.path("started-1")).expect("remove the mark");
        let mut w = worker(ctx, "w2", &[&key], script);
        ctx.wait_file("started-1", PROMPT);
        common::send_signal(w.pid(), libc::SIGTERM);
        std::thread::sleep(Duration::from_millis(200));
        common::send_signal(w.pid(), libc::SIGTERM);
        w.wait(PROMPT).assert_code(0);
        let rows = ctx.baton(["jobs", "--json", key.as_str()]).run();
        let row: serde_json::Value =
            serde_json::from_str(rows.stdout.lines().next().unwrap_or("{}")).expect("JSON");
        assert_eq!(row["id"], second.as_str(), "{}", rows.describe());
        assert_eq!(row["state"], "queued");
        assert_eq!(row["attempt"], 1, "given back unspent");
    });
}

#[test]
fn baton_run_turns_and_jobs_share_one_queue_on_a_key() {
    for_each_store(|ctx| {
        let key = ctx.key("mixed");
        // R1 holds; then a job; then R2 waits behind the job.
        let mut r1 = ctx.spawn_gated("R1", &key, &[]);
        ctx.wait_started("R1");
        let job = submit(ctx, &key, &["--context", "J"]);
        let mut r2 = ctx.spawn_gated("R2", &key, &["--poll", "100ms"]);
        ctx.wait_queued(&key, "R2");
        let mut w = worker(
            ctx,
            "w",
            &[&key],
            "echo \"J start\" >> \"$TEST_DIR/log\"; sleep 0.3; echo \"J end\" >> \"$TEST_DIR/log\"",
        );
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            ctx.log(),
            ["R1 start"],
            "the job waits for the turn ahead of it"
        );
        ctx.open_gate("R1");
        r1.wait(PROMPT).assert_code(0);
        ctx.baton(["wait", key.as_str(), job.as_str()])
            .run()
            .assert_code(0);
        ctx.wait_started("R2");
        ctx.open_gate("R2");
        r2.wait(PROMPT).assert_code(0);
        stop(&mut w);
        assert_eq!(
            ctx.log(),
            ["R1 start", "R1 end", "J start", "J end", "R2 start", "R2 end"],
            "one order for turns and jobs"
        );
    });
}

/// An idle worker is woken by the store's push, not its poll: with `--poll 1h`, jobs submitted
/// while it waits still run (three in turn, each after the worker went idle again). On the
/// stores that push changes under a prefix (SQLite, PostgreSQL, Redis); the others poll.
#[test]
fn an_idle_worker_is_woken_by_a_submit_where_the_store_pushes() {
    for_each_store(|ctx| {
        let pushes = ["sqlite:", "postgres", "redis"]
            .iter()
            .any(|scheme| ctx.store.starts_with(scheme));
        if !pushes {
            return;
        }
        let script = "echo \"ran $BATON_JOB_ID\" >> \"$TEST_DIR/log\"";
        let mut args = vec!["worker", "--poll", "1h", ctx.prefix.as_str()];
        args.extend_from_slice(&["--", "sh", "-c", script]);
        let mut w = ctx.baton(args).name("w").spawn();
        let mut ran = Vec::new();
        for n in 0..3 {
            let key = ctx.key(&format!("k{n}"));
            let id = submit(ctx, &key, &[]);
            ctx.baton(["wait", key.as_str(), id.as_str()])
                .run_within(PROMPT)
                .assert_code(0);
            ran.push(format!("ran {id}"));
        }
        stop(&mut w);
        assert_eq!(ctx.lines("log"), ran);
    });
}

/// `submit --wait` prints the id, then waits as `baton wait` does: exit 0 for a job that
/// succeeded, 1 for one that ended dead.
#[test]
fn submit_wait_exits_with_the_jobs_end() {
    for_each_store(|ctx| {
        let key = ctx.key("waited");
        let script = "read -r p; case \"$p\" in *fail*) exit 3 ;; esac";
        let mut w = worker(ctx, "w", &[&key], script);
        let ok = ctx
            .baton(["submit", key.as_str(), "--params", "\"fine\"", "--wait"])
            .run_within(PROMPT);
        ok.assert_code(0);
        assert!(ok.stdout.trim().starts_with("j-"), "{}", ok.describe());
        let dead = ctx
            .baton([
                "submit",
                key.as_str(),
                "--params",
                "\"fail\"",
                "--max-attempts",
                "1",
                "--wait",
            ])
            .run_within(PROMPT);
        dead.assert_code(1);
        stop(&mut w);
    });
}

/// A key whose queued jobs outgrow the document's window keeps the rest in its backlog
/// (segments written beside the key, and a tail in the document): listed in order with their
/// places, cancelled where they wait, submitted again by id without a second job, and run in
/// submit order. The window holds 16 and a segment 32, so 60 jobs fill both.
#[test]
fn a_backlog_beyond_the_window_is_listed_cancelled_and_run_in_order() {
    for_each_store(|ctx| {
        let key = ctx.key("deep");
        let script = format!(
            "for i in $(seq 1 60); do {} submit {key} --id j$i > /dev/null || exit 1; done",
            common::baton_bin().display()
        );
        // Sixty processes one after another: 4.5 s alone on DynamoDB's emulator, and over the
        // default 30 s once in a full run beside the torture runs.
        ctx.sh("submit-60", &script)
            .run_within(Duration::from_secs(120))
            .assert_code(0);
        let listed = ctx
            .baton(["jobs", key.as_str(), "-l", "100", "--json"])
            .run();
        listed.assert_code(0);
        let rows: Vec<serde_json::Value> = listed
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON row"))
            .collect();
        let ids: Vec<&str> = rows.iter().filter_map(|r| r["id"].as_str()).collect();
        let expected: Vec<String> = (1..=60).map(|i| format!("j{i}")).collect();
        assert_eq!(ids, expected, "{}", listed.describe());
        let positions: Vec<u64> = rows.iter().filter_map(|r| r["position"].as_u64()).collect();
        // 1 is next in line, as `baton status` counts.
        assert_eq!(positions, (1..=60).collect::<Vec<u64>>());
        // `baton status` lists the window and counts the backlog.
        let status = ctx.key_status(&key).expect("the key's status");
        let shown = status.queue().len() as u64;
        let backlog = status.raw["backlog"].as_u64().unwrap_or(0);
        assert_eq!((shown + backlog, shown), (60, 16), "{}", status.raw);
        // j30 waits in a written segment, j55 in the tail.
        for id in ["j30", "j55"] {
            ctx.baton(["cancel", key.as_str(), id]).run().assert_code(0);
        }
        assert_eq!(submit(ctx, &key, &["--id", "j20"]), "j20");
        ctx.baton(["wait", key.as_str(), "j30"])
            .run()
            .assert_code(77);
        let mut w = worker(ctx, "w", &[&key], &logging_job("0", 0));
        // One worker runs the 58 jobs one after another, each a claim, a process and its
        // end: near a second each through a server beside the torture runs, past the
        // default 30 s.
        ctx.baton(["wait", key.as_str(), "j60"])
            .run_within(Duration::from_secs(150))
            .assert_code(0);
        stop(&mut w);
        let starts: Vec<String> = ctx
            .lines("log")
            .iter()
            .filter_map(|l| l.strip_prefix("start ").map(str::to_owned))
            .collect();
        let ran: Vec<String> = (1..=60)
            .filter(|i| ![30, 55].contains(i))
            .map(|i| format!("{key} j{i}"))
            .collect();
        assert_eq!(starts, ran, "each once, in submit order");
        ctx.baton(["wait", key.as_str(), "j55"])
            .run()
            .assert_code(77);
    });
}

/// Rewrites record `name` of `key` directly in the test's store (behind its server, if any),
/// as anyone holding the store's credentials could: `edit` gets the bytes and returns the new.
fn rewrite_record(ctx: &Ctx, key: &str, name: &str, edit: impl Fn(String) -> String) {
    let url = ctx
        .behind_server
        .as_ref()
        .map_or(ctx.store.clone(), |(behind, _)| behind.clone());
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let store = baton_store::url::open(&url).await.expect("open the store");
        let bytes = store
            .get_record(key, name)
            .await
            .expect("read")
            .expect("there");
        let edited = edit(String::from_utf8(bytes).expect("text"));
        store
            .put_record(key, name, edited.as_bytes())
            .await
            .expect("write");
    });
}

#[test]
fn a_worker_never_runs_parameters_replaced_after_the_submit() {
    for_each_store(|ctx| {
        let key = ctx.key("deploy");
        let id = submit(
            ctx,
            &key,
            &["--params", "{\"commit\":\"good\"}", "--max-attempts", "1"],
        );
        rewrite_record(ctx, &key, &format!("job/{id}"), |record| {
            record.replace("good", "evil")
        });
        let mut w = worker(
            ctx,
            "w",
            &[&key],
            "echo \"ran $BATON_PARAMS\" >> \"$TEST_DIR/log\"",
        );
        let done = ctx.baton(["wait", key.as_str(), id.as_str()]).run();
        done.assert_code(1);
        assert!(done.stderr.contains("dead"), "{}", done.describe());
        let replaced = format!("the parameters of job {id} were replaced after it was submitted");
        // The worker says so after the write that made the job dead, which `wait` may see
        // first.
        wait_until(
            "the worker's word on the replaced parameters",
            PROMPT,
            || w.stderr().contains(&replaced),
        );
        stop(&mut w);
        assert!(
            !ctx.exists("log"),
            "the worker ran a command: {}",
            ctx.read("log")
        );
        let done = ctx
            .baton(["jobs", "-s", "dead", "--json", key.as_str()])
            .run();
        assert!(done.stdout.contains(&replaced), "{}", done.describe());
        // `retry` keeps the first submit's hash: refused while the record is the replaced one.
        let done = ctx.baton(["retry", key.as_str(), id.as_str()]).run();
        assert_ne!(done.code, Some(0), "{}", done.describe());
        assert!(done.stderr.contains(&replaced), "{}", done.describe());
    });
}
