//! The GitHub Action (`integrations/github`) run as GitHub's runner runs it: `node` on the
//! committed bundles in `dist/`, with the inputs in `INPUT_*` variables, the outputs and the
//! state written to the files `GITHUB_OUTPUT` and `GITHUB_STATE` name, and the state read back
//! into `STATE_*` variables for the post step, against the `baton` this crate built (on `PATH`)
//! and a real store: a fresh SQLite file, and the S3 store (moto) when `BATON_TEST_S3_URL` is
//! set, as `scripts/test.sh` sets it.
//!
//! The one-job form keeps its turn alive with a keeper (`baton acquire --keep-alive`): the tests
//! of that run it on short leases, watch the keeper by the pid the main step leaves in the state,
//! and kill it as a dying runner would.
//!
//! It needs `node` (`scripts/test.sh` installs Debian's `nodejs`).

use baton_testkit as common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::ci::on_sqlite_and_s3;
use common::dist::{dist_command, run_checked, stripped_baton};
use common::fake_ci::{FakeCi, Reply, GITHUB_TOKEN};
use common::fake_issuer::FakeIssuer;
use common::{as_u64_lenient, baton_bin, with_fresh_sqlite, Ctx, Done, Proc, PROMPT};

/// The action's folder in the repository.
fn action_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("github")
}

/// What the runner knows of one job: its number (for file names) and its variables.
struct Job<'c> {
    ctx: &'c Ctx,
    name: String,
    /// A directory holding only a `baton` link to the binary under test, first on `PATH`;
    /// `None`: no `baton` on `PATH` (the action must install one).
    bin_dir: Option<PathBuf>,
    /// `RUNNER_TOOL_CACHE`, where the action installs baton (unset: under `RUNNER_TEMP`).
    tool_cache: Option<PathBuf>,
    /// More of the runner's variables.
    env: Vec<(String, String)>,
}

/// The files and output of one step (main, post, or a sub-action's only step).
struct Step {
    done: Done,
    outputs: BTreeMap<String, String>,
    state: BTreeMap<String, String>,
}

impl<'c> Job<'c> {
    fn new(ctx: &'c Ctx, name: &str) -> Job<'c> {
        let bin_dir = ctx.path("bin");
        if !bin_dir.exists() {
            std::fs::create_dir_all(&bin_dir).expect("create the bin directory");
            std::os::unix::fs::symlink(baton_bin(), bin_dir.join("baton"))
                .expect("link baton into the bin directory");
        }
        Job {
            ctx,
            name: name.to_owned(),
            bin_dir: Some(bin_dir),
            tool_cache: None,
            env: Vec::new(),
        }
    }

    /// This job, with the runner's variables `env` besides the usual ones.
    fn with_env(mut self, env: Vec<(String, String)>) -> Job<'c> {
        self.env = env;
        self
    }

    /// A job on a runner without `baton` (`PATH` as the test's, which has none) and with a
    /// tool cache.
    fn without_baton(ctx: &'c Ctx, name: &str, tool_cache: &Path) -> Job<'c> {
        Job {
            ctx,
            name: name.to_owned(),
            bin_dir: None,
            tool_cache: Some(tool_cache.to_owned()),
            env: Vec::new(),
        }
    }

    /// `node dist/ENTRY.js` with the runner's variables, `inputs` as `INPUT_*` and `state` as
    /// `STATE_*`, started (not waited for).
    fn spawn(
        &self,
        step: &str,
        entry: &str,
        inputs: &[(&str, &str)],
        state: &BTreeMap<String, String>,
    ) -> Proc {
        let tag = format!("{}-{step}", self.name);
        let output_file = self.ctx.path(&format!("{tag}.output"));
        let state_file = self.ctx.path(&format!("{tag}.state"));
        let path_file = self.ctx.path(&format!("{tag}.path"));
        for file in [&output_file, &state_file, &path_file] {
            std::fs::write(file, b"").expect("create a runner file");
        }
        let outer_path = std::env::var("PATH").unwrap_or_default();
        let path = match &self.bin_dir {
            Some(dir) => format!("{}:{outer_path}", dir.display()),
            None => outer_path,
        };
        let script = action_dir().join("dist").join(format!("{entry}.js"));
        let mut cmd = self
            .ctx
            .program(&tag, "node", [&script])
            .env("PATH", path)
            .env("GITHUB_ACTIONS", "true")
            .env("CI", "true")
            .env("GITHUB_WORKFLOW", "deploy")
            .env("GITHUB_JOB", &self.name)
            .env("GITHUB_RUN_NUMBER", "7")
            .env("GITHUB_RUN_ID", "1234567")
            .env("GITHUB_REPOSITORY", "acme/app")
            .env("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567")
            .env("GITHUB_ACTOR", "octocat")
            .env("GITHUB_SERVER_URL", "https://github.example")
            .env("GITHUB_OUTPUT", &output_file)
            .env("GITHUB_STATE", &state_file)
            .env("GITHUB_PATH", &path_file)
            .env("RUNNER_TEMP", self.ctx.dir())
            // Where the keeper writes its log (beside the per-user store by default).
            .env("XDG_STATE_HOME", self.ctx.path("state"))
            .name(&tag);
        if let Some(cache) = &self.tool_cache {
            cmd = cmd.env("RUNNER_TOOL_CACHE", cache);
        }
        for (name, value) in inputs {
            // The runner's rule: upper case, spaces to underscores, dashes kept.
            cmd = cmd.env(
                format!("INPUT_{}", name.replace(' ', "_").to_uppercase()),
                value,
            );
        }
        for (name, value) in state {
            cmd = cmd.env(format!("STATE_{name}"), value);
        }
        for (name, value) in &self.env {
            cmd = cmd.env(name, value);
        }
        cmd.spawn()
    }

    /// Runs a step to its end and reads back what it left for the runner.
    fn run(
        &self,
        step: &str,
        entry: &str,
        inputs: &[(&str, &str)],
        state: &BTreeMap<String, String>,
    ) -> Step {
        let mut proc = self.spawn(step, entry, inputs, state);
        self.finish(step, &mut proc)
    }

    fn finish(&self, step: &str, proc: &mut Proc) -> Step {
        let done = proc.wait(PROMPT);
        let tag = format!("{}-{step}", self.name);
        Step {
            outputs: file_commands(&self.ctx.path(&format!("{tag}.output"))),
            state: file_commands(&self.ctx.path(&format!("{tag}.state"))),
            done,
        }
    }
}

/// The `NAME=VALUE` and `NAME<<DELIMITER` … `DELIMITER` entries of a runner file
/// (`GITHUB_OUTPUT`, `GITHUB_STATE`), read as the runner reads them.
fn file_commands(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).expect("read a runner file");
    let mut entries = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.is_empty() {
            continue;
        }
        if let Some((name, delimiter)) = line.split_once("<<") {
            let mut value = Vec::new();
            loop {
                let next = lines
                    .next()
                    .unwrap_or_else(|| panic!("{name}: no closing {delimiter} in:\n{text}"));
                if next == delimiter {
                    break;
                }
                value.push(next);
            }
            entries.insert(name.to_owned(), value.join("\n"));
        } else if let Some((name, value)) = line.split_once('=') {
            entries.insert(name.to_owned(), value.to_owned());
        } else {
            panic!("a line the runner cannot read: {line:?} in:\n{text}");
        }
    }
    entries
}

/// The step succeeded (exit 0, no `::error::` workflow command).
fn assert_step_ok(step: &Step) {
    step.done.assert_code(0);
    assert!(
        !step.done.stdout.contains("::error::"),
        "the step reported an error:\n{}",
        step.done.describe()
    );
}

/// The step failed the way an action fails: exit 1 and an `::error::` line saying `why`.
fn assert_step_failed(step: &Step, why: &str) {
    step.done.assert_code(1);
    let error = step
        .done
        .stdout
        .lines()
        .find(|line| line.starts_with("::error::"))
        .unwrap_or_else(|| panic!("no ::error:: line:\n{}", step.done.describe()));
    assert!(
        error.contains(why),
        "the error does not say {why:?}: {error}\n{}",
        step.done.describe()
    );
}

/// The ticket is masked (`::add-mask::`) before anything else prints it, and nothing but the
/// runner's files hold it in clear.
fn assert_ticket_masked(step: &Step, ticket: &str) {
    let stdout = &step.done.stdout;
    let mask = format!("::add-mask::{ticket}");
    let masked_at = stdout
        .find(&mask)
        .unwrap_or_else(|| panic!("the ticket is not masked:\n{}", step.done.describe()));
    let first_seen = stdout.find(ticket).expect("the mask line holds it");
    assert!(
        first_seen >= masked_at + "::add-mask::".len(),
        "the ticket is printed before it is masked:\n{stdout}"
    );
    assert_eq!(
        stdout.matches(ticket).count(),
        1,
        "the ticket is printed besides its mask line:\n{stdout}"
    );
    assert!(
        !step.done.stderr.contains(ticket),
        "the ticket is in the step's stderr:\n{}",
        step.done.stderr
    );
}

fn fence_of(step: &Step) -> u64 {
    step.outputs
        .get("fence")
        .and_then(|fence| fence.parse().ok())
        .unwrap_or_else(|| panic!("no numeric fence output: {:?}", step.outputs))
}

/// The main step's inputs for `key`, as the runner passes them: every input of action.yml that
/// the workflow does not set arrives with its default.
fn main_inputs<'a>(key: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut inputs = vec![
        ("name", key),
        ("lease", "1m"),
        ("expires", "2m"),
        ("timeout", ""),
        ("timeout-poll", "200ms"),
        ("context", ""),
        ("store", ""),
        ("limit", ""),
        ("slots", ""),
        ("slot", ""),
        ("count", ""),
        ("shared", "false"),
        ("order", ""),
        ("supersede", "false"),
        ("keep", "false"),
        ("cancel-running", "false"),
        ("mask-ticket", "true"),
        ("baton-version", ""),
        ("baton-url", ""),
        ("token", ""),
        ("audience", "baton"),
    ];
    for (name, value) in extra {
        match inputs.iter_mut().find(|(known, _)| known == name) {
            Some(entry) => entry.1 = value,
            None => inputs.push((name, value)),
        }
    }
    inputs
}

#[test]
fn main_holds_the_key_for_the_job_and_post_releases_it_with_the_jobs_status() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let job = Job::new(ctx, "ship");
        let main = job.run("main", "main", &main_inputs(&key, &[]), &BTreeMap::new());
        assert_step_ok(&main);

        let ticket = main.outputs.get("ticket").expect("a ticket output").clone();
        assert_ticket_masked(&main, &ticket);
        assert_eq!(main.outputs.get("key"), Some(&key));
        assert!(fence_of(&main) >= 1);
        assert_eq!(
            main.outputs.get("position-at-start").map(String::as_str),
            Some("0")
        );
        let waited: f64 = main.outputs["waited-seconds"].parse().expect("seconds");
        assert!(waited >= 0.0, "waited-seconds: {waited}");
        for time in ["acquired-at", "lease-until"] {
            assert!(
                main.outputs.get(time).is_some_and(|t| t.contains('T')),
                "{time} is RFC 3339: {:?}",
                main.outputs
            );
        }
        // baton's own GitHub context: "{workflow} #{run}" and the rest.
        let view = ctx.key_view(&key);
        let holders = view.holder_contexts();
        assert_eq!(holders.len(), 1, "one holder: {}", view.raw);
        assert!(
            holders[0].starts_with("deploy #7, job ship, commit 0123456"),
            "the context: {holders:?}"
        );
        assert_eq!(
            main.state.get("ticket"),
            Some(&ticket),
            "the post step gets the ticket through the state"
        );

        // The job's later steps failed: the runner evaluates `${{ job.status }}` again for the
        // post step's `outcome` input.
        let post = job.run("post", "post", &[("outcome", "failure")], &main.state);
        assert_step_ok(&post);
        assert_ticket_masked(&post, &ticket);
        let view = ctx.key_view(&key);
        assert!(view.holders().is_empty(), "released: {}", view.raw);
        assert_eq!(
            view.last_outcome().as_deref(),
            Some("failed"),
            "{}",
            view.raw
        );

        // Another run of the job, which succeeds: a higher fence, recorded as succeeded.
        let job = Job::new(ctx, "ship-again");
        let main_again = job.run("main", "main", &main_inputs(&key, &[]), &BTreeMap::new());
        assert_step_ok(&main_again);
        assert!(fence_of(&main_again) > fence_of(&main));
        let post = job.run("post", "post", &[("outcome", "success")], &main_again.state);
        assert_step_ok(&post);
        assert_eq!(
            ctx.key_view(&key).last_outcome().as_deref(),
            Some("succeeded")
        );
    });
}

#[test]
fn a_main_step_that_gets_no_turn_fails_and_its_post_step_releases_nothing() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let holder = ctx
            .baton(["acquire", &key, "--ttl", "2m", "--context", "someone else"])
            .run();
        holder.assert_code(0);

        let job = Job::new(ctx, "late");
        let main = job.run(
            "main",
            "main",
            &main_inputs(&key, &[("timeout", "1s")]),
            &BTreeMap::new(),
        );
        assert_step_failed(&main, "timed out after 1s");
        assert!(
            main.done.stdout.contains("someone else") || main.done.stderr.contains("someone else"),
            "the failure (or the waiting line) names the holder:\n{}",
            main.done.describe()
        );
        assert!(!main.state.contains_key("ticket"), "no turn, no state");
        assert!(!main.outputs.contains_key("ticket"), "no turn, no outputs");

        let post = job.run("post", "post", &[("outcome", "failure")], &main.state);
        assert_step_ok(&post);
        assert!(
            post.done.stdout.contains("nothing to release"),
            "{}",
            post.done.describe()
        );
        let view = ctx.key_view(&key);
        assert_eq!(
            view.holder_contexts(),
            ["someone else"],
            "the holder is untouched and nobody waits: {}",
            view.raw
        );
        assert!(
            view.queue().is_empty(),
            "the timed-out ticket left the queue: {}",
            view.raw
        );

        // A typo in a boolean input is refused before anything is queued.
        let typo = Job::new(ctx, "typo").run(
            "main",
            "main",
            &main_inputs(&key, &[("supersede", "ture")]),
            &BTreeMap::new(),
        );
        assert_step_failed(&typo, "input 'supersede' must be \"true\" or \"false\"");
        assert!(ctx.key_view(&key).queue().is_empty());
    });
}

#[test]
fn two_jobs_contending_take_turns_in_order_with_rising_fences() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let first = Job::new(ctx, "first");
        let first_main = first.run("main", "main", &main_inputs(&key, &[]), &BTreeMap::new());
        assert_step_ok(&first_main);

        let second = Job::new(ctx, "second");
        let mut second_main = second.spawn(
            "main",
            "main",
            // Inputs whose names hold a dash reach the action as the runner names them
            // (`INPUT_MASK-TICKET`).
            &main_inputs(&key, &[("context", "second job"), ("mask-ticket", "false")]),
            &BTreeMap::new(),
        );
        ctx.wait_queued(&key, "second job");
        assert!(!second_main.has_exited(), "the second job waits its turn");
        // The waiting line shows in the job's log while it waits.
        common::wait_until("the waiting line in the second job's log", PROMPT, || {
            second_main.stderr().contains("waiting for")
        });

        let first_post = first.run("post", "post", &[("outcome", "success")], &first_main.state);
        assert_step_ok(&first_post);

        let second_main = second.finish("main", &mut second_main);
        assert_step_ok(&second_main);
        assert!(
            !second_main.done.stdout.contains("::add-mask::"),
            "mask-ticket: false is obeyed:\n{}",
            second_main.done.stdout
        );
        assert!(fence_of(&second_main) > fence_of(&first_main));
        assert_eq!(
            second_main
                .outputs
                .get("position-at-start")
                .map(String::as_str),
            Some("1"),
            "it was next in line when its wait began"
        );
        let waited: f64 = second_main.outputs["waited-seconds"]
            .parse()
            .expect("seconds");
        assert!(waited > 0.0, "it waited: {waited}");
        assert_eq!(ctx.key_view(&key).holder_contexts(), ["second job"]);

        let second_post = second.run(
            "post",
            "post",
            &[("outcome", "success")],
            &second_main.state,
        );
        assert_step_ok(&second_post);
        assert!(ctx.key_view(&key).holders().is_empty());
    });
}

/// A pool (`slots`): each job gets a free slot as its `slot` output, in the pool's order, and
/// a job asking for one slot by name (`slot`) waits for that one.
#[test]
fn on_a_pool_each_job_gets_a_free_slot_as_its_output() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("envs/staging");
        let pool = [("slots", "staging-1,staging-2")];
        let first = Job::new(ctx, "first");
        let first_main = first.run("main", "main", &main_inputs(&key, &pool), &BTreeMap::new());
        assert_step_ok(&first_main);
        assert_eq!(first_main.outputs["slot"], "staging-1");
        assert!(
            first_main.done.stdout.contains("holding ")
                && first_main.done.stdout.contains(" slot staging-1 "),
            "{}",
            first_main.done.stdout
        );

        let wants_first = Job::new(ctx, "wants-first");
        let inputs = [
            pool[0],
            ("slot", "staging-1"),
            ("context", "wants staging-1"),
        ];
        let mut waiting = wants_first.spawn(
            "main",
            "main",
            &main_inputs(&key, &inputs),
            &BTreeMap::new(),
        );
        ctx.wait_queued(&key, "wants staging-1");

        let second = Job::new(ctx, "second");
        let second_main = second.run("main", "main", &main_inputs(&key, &pool), &BTreeMap::new());
        assert_step_ok(&second_main);
        assert_eq!(
            second_main.outputs["slot"], "staging-2",
            "the free slot, past the waiter"
        );
        assert!(!waiting.has_exited(), "staging-1 is still held");

        let post = first.run("post", "post", &[("outcome", "success")], &first_main.state);
        assert_step_ok(&post);
        let waited = wants_first.finish("main", &mut waiting);
        assert_step_ok(&waited);
        assert_eq!(waited.outputs["slot"], "staging-1");
        for (job, main) in [(&second, &second_main), (&wants_first, &waited)] {
            assert_step_ok(&job.run("post", "post", &[("outcome", "success")], &main.state));
        }
        assert!(ctx.key_view(&key).holders().is_empty());
    });
}

#[test]
fn the_acquire_and_release_sub_actions_hold_a_turn_across_jobs() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let lock_job = Job::new(ctx, "lock");
        // acquire/action.yml's default for mask-ticket is "false".
        let inputs = main_inputs(&key, &[("mask-ticket", "false")]);
        let acquired = lock_job.run("main", "acquire", &inputs, &BTreeMap::new());
        assert_step_ok(&acquired);
        let ticket = acquired
            .outputs
            .get("ticket")
            .expect("a ticket output")
            .clone();
        assert!(
            !acquired.done.stdout.contains("::add-mask::"),
            "the multi-job ticket is not masked (a masked job output is dropped):\n{}",
            acquired.done.stdout
        );
        assert!(
            acquired.state.is_empty(),
            "no post step, no state: {:?}",
            acquired.state
        );
        assert_eq!(ctx.key_view(&key).holders().len(), 1);
        // No keeper: the turn spans jobs, so its lease is `expires` (2m), not a renewed 1m one.
        assert!(
            !acquired.done.stdout.contains("keeper"),
            "{}",
            acquired.done.describe()
        );
        if ctx.store_has_clock() {
            let left = ctx.key_view(&key).holders()[0].lease_left_ms();
            assert!(left.is_some_and(|ms| ms > 61_000), "lease left: {left:?}");
        }

        // A job in between sees the key held.
        let view = ctx.key_view(&key);
        assert_eq!(
            as_u64_lenient(&view.holders()[0].raw["fence"]),
            Some(fence_of(&acquired))
        );

        let unlock_job = Job::new(ctx, "unlock");
        let released = unlock_job.run(
            "main",
            "release",
            &[
                ("key", &key),
                ("ticket", &ticket),
                ("store", ""),
                ("outcome", "success"),
                ("baton-version", ""),
                ("baton-url", ""),
                ("token", ""),
            ],
            &BTreeMap::new(),
        );
        assert_step_ok(&released);
        assert_ticket_masked(&released, &ticket);
        let view = ctx.key_view(&key);
        assert!(view.holders().is_empty(), "released: {}", view.raw);
        assert_eq!(view.last_outcome().as_deref(), Some("succeeded"));

        // The lock job failed (empty outputs): the release job, under `if: always()`, does
        // nothing and succeeds.
        let empty = unlock_job.run(
            "again",
            "release",
            &[("key", ""), ("ticket", ""), ("outcome", "skipped")],
            &BTreeMap::new(),
        );
        assert_step_ok(&empty);
        assert!(empty.done.stdout.contains("nothing to release"));

        // Releasing twice is a warning, not a failed job.
        let twice = unlock_job.run(
            "twice",
            "release",
            &[("key", &key), ("ticket", &ticket), ("outcome", "success")],
            &BTreeMap::new(),
        );
        assert_step_ok(&twice);
        assert!(
            twice.done.stdout.contains("::warning::"),
            "a second release warns:\n{}",
            twice.done.describe()
        );
    });
}

// ----- the one-job form's keeper -----

/// The lease of the kept-alive turns below: several pass while a test looks.
const LEASE: &str = "3s";
const LEASE_SECS: u64 = 3;
/// `main_inputs`' `timeout-poll`: the longest a waiter goes without looking.
const POLL: Duration = Duration::from_millis(200);
/// What a loaded machine may add to "within a lease and a poll".
const SLACK: Duration = Duration::from_secs(7);

/// The keeper's pid, from the state the main step left for the post step.
fn keeper_pid(main: &Step) -> i32 {
    main.state
        .get("keeper-pid")
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no keeper-pid in the state: {:?}", main.state))
}

/// What the keepers of this test wrote to their logs (`XDG_STATE_HOME` is the test's `state`).
fn keeper_logs(ctx: &Ctx) -> String {
    let dir = ctx.path("state").join("baton").join("keepers");
    let mut text = String::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
    }
    text
}

/// Watches `key` for `how_long`: the ticket with `holder` holds it, and one with `waiter` waits,
/// at every look (the holder's lease is much shorter than that: it is being renewed).
fn held_throughout(ctx: &Ctx, key: &str, holder: &str, waiter: &str, how_long: Duration) {
    let started = Instant::now();
    while started.elapsed() < how_long {
        let view = ctx.key_view(key);
        assert_eq!(
            view.holder_contexts(),
            [holder],
            "{:?} after {:?}: {}\nkeeper logs:\n{}",
            holder,
            started.elapsed(),
            view.raw,
            keeper_logs(ctx)
        );
        assert_eq!(view.queue_contexts(), [waiter], "{}", view.raw);
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The outcomes in `key`'s history by context, newest first.
fn ended_turns(ctx: &Ctx, key: &str) -> Vec<(String, String)> {
    ctx.history(key)
        .iter()
        .filter(|entry| entry["outcome"].is_string())
        .map(|entry| {
            let context = entry["context"].as_str().unwrap_or_default().to_owned();
            let outcome = entry["outcome"].as_str().unwrap_or_default().to_owned();
            (context, outcome)
        })
        .collect()
}

#[test]
fn the_one_job_turn_outlives_its_leases_until_the_post_step_releases_it() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let first = Job::new(ctx, "first");
        let inputs = main_inputs(&key, &[("lease", LEASE), ("context", "first job")]);
        let main = first.run("main", "main", &inputs, &BTreeMap::new());
        assert_step_ok(&main);
        let pid = keeper_pid(&main);
        assert!(
            common::pid_alive(pid),
            "the keeper runs after the main step"
        );

        let second = Job::new(ctx, "second");
        let inputs = main_inputs(&key, &[("lease", LEASE), ("context", "second job")]);
        let mut second_main = second.spawn("main", "main", &inputs, &BTreeMap::new());
        ctx.wait_queued(&key, "second job");
        held_throughout(
            ctx,
            &key,
            "first job",
            "second job",
            Duration::from_secs(3 * LEASE_SECS),
        );

        // The job failed; the post step releases with that, and sees the keeper end.
        let post = first.run("post", "post", &[("outcome", "failure")], &main.state);
        assert_step_ok(&post);
        assert!(
            !common::pid_alive(pid),
            "the keeper is gone after the post step:\n{}",
            post.done.describe()
        );
        assert!(
            keeper_logs(ctx).contains("the turn is over"),
            "the keeper ended by itself, seeing the release:\n{}\n{}",
            keeper_logs(ctx),
            post.done.describe()
        );

        let second_main = second.finish("main", &mut second_main);
        assert_step_ok(&second_main);
        assert!(fence_of(&second_main) > fence_of(&main));
        let second_post = second.run(
            "post",
            "post",
            &[("outcome", "success")],
            &second_main.state,
        );
        assert_step_ok(&second_post);
        assert!(!common::pid_alive(keeper_pid(&second_main)));
        assert_eq!(
            ended_turns(ctx, &key),
            [
                ("second job".to_owned(), "succeeded".to_owned()),
                ("first job".to_owned(), "failed".to_owned())
            ]
        );
    });
}

#[test]
fn a_runner_killed_mid_job_frees_the_key_within_a_lease_and_a_poll() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let dead = Job::new(ctx, "dead");
        let inputs = main_inputs(&key, &[("lease", LEASE), ("context", "dead runner")]);
        let main = dead.run("main", "main", &inputs, &BTreeMap::new());
        assert_step_ok(&main);
        // A later step of the job is running when the runner dies.
        let mut work = ctx.sh("work", "sleep 600").spawn();
        let next = Job::new(ctx, "next");
        let inputs = main_inputs(&key, &[("lease", LEASE), ("context", "next job")]);
        let mut next_main = next.spawn("main", "main", &inputs, &BTreeMap::new());
        ctx.wait_queued(&key, "next job");

        // The runner dies: its processes are killed, the keeper with them, and no post step
        // runs.
        let killed_at = Instant::now();
        common::send_signal(keeper_pid(&main), libc::SIGKILL);
        work.kill();
        let next_main = next.finish("main", &mut next_main);
        let freed_after = killed_at.elapsed();
        assert_step_ok(&next_main);
        let bound = Duration::from_secs(LEASE_SECS) + POLL + SLACK;
        assert!(
            freed_after <= bound,
            "the next job got the key {freed_after:?} after the kill (bound {bound:?})"
        );
        assert!(fence_of(&next_main) > fence_of(&main));
        assert_eq!(
            ended_turns(ctx, &key),
            [("dead runner".to_owned(), "expired".to_owned())],
            "the dead runner's turn ended by its lease"
        );
        let post = next.run("post", "post", &[("outcome", "success")], &next_main.state);
        assert_step_ok(&post);
    });
}

#[test]
fn expires_bounds_the_one_job_turn_however_long_the_job_runs() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let long = Job::new(ctx, "long");
        let inputs = main_inputs(
            &key,
            &[("lease", LEASE), ("expires", "7s"), ("context", "long job")],
        );
        let main = long.run("main", "main", &inputs, &BTreeMap::new());
        assert_step_ok(&main);
        let pid = keeper_pid(&main);
        let next = Job::new(ctx, "next");
        let inputs = main_inputs(&key, &[("lease", LEASE), ("context", "next job")]);
        let mut next_main = next.spawn("main", "main", &inputs, &BTreeMap::new());
        ctx.wait_queued(&key, "next job");

        common::wait_until("the keeper to stop at expires", PROMPT, || {
            !common::pid_alive(pid)
        });
        assert!(
            keeper_logs(ctx).contains("--max-hold (7s) passed"),
            "{}",
            keeper_logs(ctx)
        );
        let next_main = next.finish("main", &mut next_main);
        assert_step_ok(&next_main);
        let waited: f64 = next_main.outputs["waited-seconds"]
            .parse()
            .expect("seconds");
        assert!(
            waited >= 5.0,
            "the turn was renewed past its first lease ({LEASE}) up to expires (7s): the next \
             job waited {waited}s"
        );
        assert_eq!(
            ended_turns(ctx, &key),
            [("long job".to_owned(), "expired".to_owned())]
        );

        // The long job's post step comes after its turn ended: a warning, and no hang.
        let late = long.run("post", "post", &[("outcome", "success")], &main.state);
        assert_step_ok(&late);
        assert!(
            late.done.stdout.contains("::warning::"),
            "{}",
            late.done.describe()
        );
        assert_eq!(ctx.key_view(&key).holder_contexts(), ["next job"]);
        assert_step_ok(&next.run("post", "post", &[("outcome", "success")], &next_main.state));
    });
}

#[test]
fn the_committed_bundles_are_what_the_sources_build_to() {
    // The bundles run as committed; a change to src/ without a rebuild would ship old code.
    // scripts/build.sh --check needs esbuild (npm ci); the sources' own checks are above.
    let node_modules = action_dir().join("node_modules");
    if !node_modules.join(".bin/esbuild").exists() {
        let installed = std::process::Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .current_dir(action_dir())
            .output()
            .expect("run npm ci");
        assert!(
            installed.status.success(),
            "npm ci in integrations/github failed:\n{}",
            String::from_utf8_lossy(&installed.stderr)
        );
    }
    let output = std::process::Command::new("sh")
        .args(["scripts/build.sh", "--check"])
        .current_dir(action_dir())
        .output()
        .expect("run scripts/build.sh --check");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_waiting_step_superseded_by_a_newer_one_fails_and_says_so_unless_kept() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let holder = Job::new(ctx, "holder");
        let held = holder.run("main", "main", &main_inputs(&key, &[]), &BTreeMap::new());
        assert_step_ok(&held);

        let older = Job::new(ctx, "older");
        let mut older_main = older.spawn(
            "main",
            "main",
            &main_inputs(&key, &[("context", "older"), ("order", "0001")]),
            &BTreeMap::new(),
        );
        ctx.wait_queued(&key, "older");
        let kept = Job::new(ctx, "kept");
        let mut kept_main = kept.spawn(
            "main",
            "main",
            &main_inputs(
                &key,
                &[("context", "kept"), ("order", "0002"), ("keep", "true")],
            ),
            &BTreeMap::new(),
        );
        ctx.wait_queued(&key, "kept");
        let newer = Job::new(ctx, "newer");
        let mut newer_main = newer.spawn(
            "main",
            "main",
            &main_inputs(
                &key,
                &[
                    ("context", "newer"),
                    ("order", "0003"),
                    ("supersede", "true"),
                ],
            ),
            &BTreeMap::new(),
        );
        ctx.wait_queued(&key, "newer");

        let older_main = older.finish("main", &mut older_main);
        assert_step_failed(&older_main, "superseded");
        assert!(!older_main.state.contains_key("ticket"));
        assert_eq!(
            ctx.key_view(&key).queue_contexts(),
            ["kept", "newer"],
            "the kept ticket stays ahead of the one that superseded the older"
        );

        assert_step_ok(&holder.run("post", "post", &[("outcome", "success")], &held.state));
        let kept_main = kept.finish("main", &mut kept_main);
        assert_step_ok(&kept_main);
        assert_step_ok(&kept.run("post", "post", &[("outcome", "success")], &kept_main.state));
        let newer_main = newer.finish("main", &mut newer_main);
        assert_step_ok(&newer_main);
        assert!(fence_of(&newer_main) > fence_of(&kept_main));
        assert_step_ok(&newer.run("post", "post", &[("outcome", "success")], &newer_main.state));
    });
}

#[test]
fn a_job_cancelled_while_its_step_waits_withdraws_its_ticket() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        let holder = ctx
            .baton(["acquire", &key, "--ttl", "2m", "--context", "holder"])
            .run();
        holder.assert_code(0);
        let job = Job::new(ctx, "cancelled");
        let mut main = job.spawn(
            "main",
            "main",
            &main_inputs(&key, &[("context", "to be cancelled")]),
            &BTreeMap::new(),
        );
        ctx.wait_queued(&key, "to be cancelled");
        // The runner cancels a job by sending SIGINT to the step's process (node).
        common::send_signal(main.pid(), libc::SIGINT);
        let main = job.finish("main", &mut main);
        assert_step_failed(&main, "cancelled while waiting for a turn");
        assert!(!main.state.contains_key("ticket"));
        ctx.wait_status("the cancelled ticket to leave", &key, PROMPT, |view| {
            view.queue().is_empty()
        });
        assert_eq!(ctx.key_view(&key).holder_contexts(), ["holder"]);
    });
}

#[test]
fn without_baton_on_path_the_action_installs_it_with_install_sh_and_the_post_step_reuses_it() {
    let on_path = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("baton"))
        .find(|candidate| candidate.exists());
    assert!(
        on_path.is_none(),
        "this test needs a PATH without baton, and found {on_path:?}"
    );
    with_fresh_sqlite(|ctx| {
        // The release archive scripts/dist.sh makes of this build, reached by a file:// URL
        // (install.sh's HTTP downloads are tested in tests/install.rs).
        let packed = ctx.path("packed");
        std::fs::create_dir_all(&packed).expect("create a directory");
        let binary = stripped_baton(&packed);
        let out = ctx.path("release");
        let made = run_checked(&mut dist_command(&binary, &out, None), "dist.sh");
        let archive = String::from_utf8_lossy(&made.stdout).trim().to_owned();
        let url = format!("file://{archive}");

        let key = ctx.key("deploy/production");
        let tool_cache = ctx.path("tool-cache");
        let job = Job::without_baton(ctx, "fresh-runner", &tool_cache);
        let inputs = main_inputs(&key, &[("baton-url", &url), ("store", &ctx.store)]);
        let main = job.run("main", "main", &inputs, &BTreeMap::new());
        assert_step_ok(&main);
        let installed = tool_cache.join("baton").join("baton");
        assert!(installed.is_file(), "installed into the tool cache");
        assert!(
            main.done.stdout.contains("installing with sh"),
            "{}",
            main.done.describe()
        );
        assert_eq!(
            main.state.get("baton").map(PathBuf::from),
            Some(installed.clone()),
            "the post step is told which baton took the turn"
        );
        // Later steps of the job find it on PATH (the runner reads GITHUB_PATH).
        let added =
            std::fs::read_to_string(ctx.path("fresh-runner-main.path")).expect("read GITHUB_PATH");
        assert_eq!(added.trim(), tool_cache.join("baton").display().to_string());
        assert_eq!(ctx.key_view(&key).holders().len(), 1);

        // The post step gets the main step's state, and with it the installed binary.
        let post = job.run(
            "post",
            "post",
            &[("outcome", "success"), ("baton-url", &url)],
            &main.state,
        );
        assert_step_ok(&post);
        assert!(
            !post.done.stdout.contains("installing with sh"),
            "the post step reuses the installed baton:\n{}",
            post.done.describe()
        );
        assert_eq!(
            ctx.key_view(&key).last_outcome().as_deref(),
            Some("succeeded")
        );
    });
}

#[test]
fn cancel_running_stops_a_running_deploy_and_takes_the_turn_after_it() {
    on_sqlite_and_s3(|ctx| {
        let key = ctx.key("deploy/production");
        // A deploy running under `baton run` (renewed every second).
        let mut running = ctx.spawn_gated("deploy", &key, &["--ttl", "3s"]);
        ctx.wait_started("deploy");
        let job = Job::new(ctx, "newer");
        let main = job.run(
            "main",
            "main",
            &main_inputs(&key, &[("cancel-running", "true"), ("context", "newer")]),
            &BTreeMap::new(),
        );
        assert_step_ok(&main);
        let stopped = running.wait(PROMPT);
        stopped.assert_code(76);
        assert_eq!(
            ctx.log(),
            ["deploy start"],
            "the running deploy was stopped"
        );
        assert!(fence_of(&main) > ctx.written_fence("deploy"));
        assert_eq!(ctx.key_view(&key).holder_contexts(), ["newer"]);
        assert_step_ok(&job.run("post", "post", &[("outcome", "success")], &main.state));
    });
}

/// Through a `baton serve --trust` and with no `token` input, the action asks the runner's
/// token service (`ACTIONS_ID_TOKEN_REQUEST_URL`, faked on loopback) for the run's ID token
/// with its `audience`, masks it, and bears it: the server checks it against the (fake)
/// issuer's keys and its policy, and the turn names the run. Without `permissions: id-token:
/// write` the runner sets no request URL: the action goes on without a token and says why.
#[test]
fn through_baton_serve_the_action_bears_the_runs_id_token() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("deploy/prod");
        let issuer = FakeIssuer::start();
        let policy = issuer.policy(
            "acme app",
            "ci-lock",
            r#"repository = "acme/app""#,
            &[&format!("lock:{key}")],
        );
        let trust = ctx.path("trust.toml");
        std::fs::write(&trust, policy).expect("write the trust file");
        let (_server, address) = ctx.serve(&["--trust", trust.to_str().expect("a path")]);
        let store = format!("http://{address}");
        let mut claims = issuer.github_claims("acme/app", "refs/heads/main", "1234567", 300);
        claims["aud"] = "ci-lock".into();
        let id_token = issuer.id_token(&claims);
        let service = FakeCi::start();
        let asked = "/id-token?api-version=2.0&audience=ci-lock";
        service.reply(asked, Reply::json(serde_json::json!({ "value": id_token })));
        let runner = vec![
            (
                "ACTIONS_ID_TOKEN_REQUEST_URL".to_owned(),
                format!("{}/id-token?api-version=2.0", service.url()),
            ),
            (
                "ACTIONS_ID_TOKEN_REQUEST_TOKEN".to_owned(),
                GITHUB_TOKEN.to_owned(),
            ),
        ];
        let job = Job::new(ctx, "ship").with_env(runner);
        let inputs = main_inputs(&key, &[("store", &store), ("audience", "ci-lock")]);
        let main = job.run("main", "main", &inputs, &BTreeMap::new());
        assert_step_ok(&main);
        let seen = service.seen();
        assert_eq!(seen.len(), 1, "one ID token asked for: {seen:?}");
        assert_eq!(seen[0].path, asked, "with the audience input");
        assert_eq!(
            seen[0].headers.get("authorization"),
            Some(&format!("Bearer {GITHUB_TOKEN}")),
            "with the runner's request token"
        );
        assert!(
            main.done
                .stdout
                .contains(&format!("::add-mask::{id_token}")),
            "the ID token is masked:\n{}",
            main.done.describe()
        );
        let holders = ctx.key_view(&key).holder_contexts();
        assert_eq!(holders.len(), 1, "held through the server");
        assert!(
            holders[0].starts_with("acme/app@refs/heads/main run 1234567 (acme app): deploy #7"),
            "the turn names the run: {holders:?}"
        );
        let post = job.run("post", "post", &[("outcome", "success")], &main.state);
        assert_step_ok(&post);
        assert!(ctx.key_view(&key).holders().is_empty(), "released");

        let job = Job::new(ctx, "no-permission");
        let main = job.run("main", "main", &inputs, &BTreeMap::new());
        assert_step_failed(&main, "takes only the ID tokens of the CIs it trusts");
        assert!(
            main.done.stdout.contains("id-token: write"),
            "{}",
            main.done.describe()
        );
    });
}
