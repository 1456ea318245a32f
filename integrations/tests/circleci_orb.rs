//! The CircleCI orb (`integrations/circleci`) with real processes: its scripts run as CircleCI
//! runs them (`sh`, the `CIRCLE_*` variables, `BASH_ENV`, the parameters as `PARAM_*`) with the
//! cargo-built `baton` on PATH, in a real git repository whose commits have chosen times and
//! messages, against a fresh SQLite store and, when `BATON_TEST_POSTGRES_URL` is set, that
//! PostgreSQL. The packed `orb.yml` is checked against what CircleCI's orb schema requires, is
//! what `pack.sh` makes of the sources, and its commands run as a small CircleCI would run them
//! (parameters filled in, `when` obeyed, `bash -eo pipefail`). One test goes through `baton
//! serve` with a lock-scoped token, as a CI runner without store credentials would.
//!
//! The scripts run alone model the job form (a turn that spans jobs, `keep_alive` unset); the
//! one-job form's tests pass `PARAM_KEEP_ALIVE=true` on short leases, or run the packed commands,
//! whose default it is, and kill the keeper by the pid wait-in-queue leaves in the job's TMPDIR.
#![allow(clippy::unwrap_used)]

use baton_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{random_hex, wait_for, wait_until, Cmd, Ctx, Done, PROMPT};
use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

/// A commit time well in the past; the workflows' commits are a few seconds apart after it.
const BASE_UNIX: u64 = 1_700_000_000;

/// The orb's directory in the repository.
fn orb_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("circleci")
}

/// Runs `test` on a fresh SQLite store, then on the PostgreSQL at `BATON_TEST_POSTGRES_URL`
/// when that is set.
fn for_each_orb_store(test: impl Fn(&Ctx)) {
    common::with_fresh_sqlite(&test);
    if let Ok(url) = std::env::var("BATON_TEST_POSTGRES_URL") {
        if !url.trim().is_empty() {
            common::with_store(url.trim(), &test);
        }
    }
}

// ----- a git repository and CircleCI workflows -----

/// A git repository in the test's scratch directory, as the checkout step leaves it.
struct Repo {
    dir: PathBuf,
}

impl Repo {
    fn new(ctx: &Ctx) -> Repo {
        let dir = ctx.path("repo");
        std::fs::create_dir_all(&dir).unwrap();
        let repo = Repo { dir };
        repo.git(&["init", "-q"], &[]);
        repo
    }

    /// Commits (an empty commit) at `at_unix` with `message`; returns its SHA-1.
    fn commit(&self, at_unix: u64, message: &str) -> String {
        let date = format!("@{at_unix} +0000");
        self.git(
            &["commit", "-q", "--allow-empty", "-m", message],
            &[("GIT_COMMITTER_DATE", &date), ("GIT_AUTHOR_DATE", &date)],
        );
        self.git(&["rev-parse", "HEAD"], &[]).trim().to_owned()
    }

    fn git(&self, args: &[&str], envs: &[(&str, &str)]) -> String {
        let output = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=CI",
                "-c",
                "user.email=ci@example.com",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(&self.dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .envs(envs.iter().copied())
            .output()
            .expect("run git");
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }
}

/// A directory holding `baton` (a symlink to the cargo-built binary), put first on PATH.
fn bin_dir(ctx: &Ctx) -> PathBuf {
    let dir = ctx.path("bin");
    if !dir.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(common::baton_bin(), dir.join("baton")).unwrap();
    }
    dir
}

/// One CircleCI workflow: its ids, its commit, and the variables its jobs see.
struct Workflow<'c> {
    ctx: &'c Ctx,
    repo: &'c Repo,
    id: String,
    sha: String,
    key: String,
    /// The job's temporary directory (TMPDIR): where note-failure.sh leaves its mark.
    tmp: PathBuf,
    bash_env: PathBuf,
}

impl<'c> Workflow<'c> {
    fn new(ctx: &'c Ctx, repo: &'c Repo, key: &str, sha: &str, name: &str) -> Workflow<'c> {
        let id = format!("wf-{name}-{}", &random_hex()[..8]);
        let tmp = ctx.path(&format!("tmp-{id}"));
        std::fs::create_dir_all(&tmp).unwrap();
        let bash_env = ctx.path(&format!("bash_env-{id}"));
        std::fs::write(&bash_env, "").unwrap();
        Workflow {
            ctx,
            repo,
            id,
            sha: sha.to_owned(),
            key: key.to_owned(),
            tmp,
            bash_env,
        }
    }

    /// The text baton's own context starts with for this workflow's jobs.
    fn context_mark(&self) -> String {
        format!("workflow {},", self.id)
    }

    /// `sh -c shell_script` in one of the workflow's jobs: in the checked-out repository, with
    /// the variables CircleCI sets, `baton` first on PATH, the job's TMPDIR and BASH_ENV, and
    /// WORKFLOW_LOCK_KEY (from the context every job of the workflow uses).
    fn shell(&self, job: &str, shell_script: &str) -> Cmd<'c> {
        static BUILD_NUM: AtomicU32 = AtomicU32::new(100);
        let build_num = BUILD_NUM.fetch_add(1, Ordering::Relaxed).to_string();
        let path = format!("{}:{}", bin_dir(self.ctx).display(), outer_path());
        let mut cmd = self
            .ctx
            .sh(&format!("{job}-{}", self.id), shell_script)
            .current_dir(&self.repo.dir)
            .env("PATH", path)
            .env("TMPDIR", &self.tmp)
            .env("BASH_ENV", &self.bash_env)
            .env("WORKFLOW_LOCK_KEY", &self.key)
            // Where a keeper writes its log (beside the per-user store by default).
            .env("XDG_STATE_HOME", self.ctx.path("state"));
        for (name, value) in self.circle_vars(job, &build_num) {
            cmd = cmd.env(name, value);
        }
        cmd
    }

    /// A job step running scripts/SCRIPT.sh with `sh`, after `prelude` (shell text), with
    /// `params` (`PARAM_*` and any other variables).
    fn step_with(&self, script: &str, params: &[(&str, &str)], prelude: &str) -> Cmd<'c> {
        let mut cmd = self
            .shell(script, &format!("{prelude} exec sh \"$ORB_SCRIPT\""))
            .env(
                "ORB_SCRIPT",
                orb_dir().join("scripts").join(format!("{script}.sh")),
            );
        for (name, value) in params {
            cmd = cmd.env(name, value);
        }
        cmd
    }

    /// The variables CircleCI sets in every job.
    fn circle_vars(&self, job: &str, build_num: &str) -> Vec<(&'static str, String)> {
        vec![
            ("CIRCLECI", "true".to_owned()),
            ("CIRCLE_WORKFLOW_ID", self.id.clone()),
            ("CIRCLE_WORKFLOW_WORKSPACE_ID", self.id.clone()),
            ("CIRCLE_SHA1", self.sha.clone()),
            ("CIRCLE_BUILD_NUM", build_num.to_owned()),
            ("CIRCLE_JOB", job.to_owned()),
            ("CIRCLE_PROJECT_REPONAME", "app".to_owned()),
            ("CIRCLE_USERNAME", "alice".to_owned()),
            (
                "CIRCLE_BUILD_URL",
                format!("https://circleci.com/gh/acme/app/{build_num}"),
            ),
        ]
    }

    fn step(&self, script: &str, params: &[(&str, &str)]) -> Cmd<'c> {
        self.step_with(script, params, "")
    }

    fn run(&self, script: &str, params: &[(&str, &str)]) -> Done {
        self.step(script, params).run()
    }

    /// wait-in-queue, which must take the turn at once.
    fn take_turn(&self, params: &[(&str, &str)]) {
        self.run("wait-in-queue", params).assert_code(0);
    }

    fn exit(&self, condition: &str, params: &[(&str, &str)]) -> Done {
        let mut all = vec![("PARAM_EXIT_CONDITION", condition)];
        all.extend_from_slice(params);
        self.run("exit-queue", &all)
    }

    /// The kv name wait-in-queue keeps the turn under.
    fn turn_name(&self) -> String {
        format!("circleci/turn/{}/{}", self.key, self.id)
    }
}

/// The token wait-in-queue left for exit-queue, if any (an ended turn's record is empty).
fn turn_token(ctx: &Ctx, workflow: &Workflow) -> Option<String> {
    let done = ctx.baton(["kv", "get", &workflow.turn_name()]).run();
    done.assert_code_in(&[0, 3]);
    Some(done.stdout.trim().to_owned()).filter(|token| !token.is_empty())
}

fn outer_path() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned())
}

fn outcomes(ctx: &Ctx, key: &str) -> Vec<String> {
    ctx.history(key)
        .iter()
        .map(|entry| entry["outcome"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// Whose turn it is at `key`: the holders' contexts.
fn holders(ctx: &Ctx, key: &str) -> Vec<String> {
    ctx.key_status(key)
        .map(|view| view.holder_contexts())
        .unwrap_or_default()
}

fn queued(ctx: &Ctx, key: &str) -> Vec<String> {
    ctx.key_status(key)
        .map(|view| view.queue_contexts())
        .unwrap_or_default()
}

fn holds(ctx: &Ctx, workflow: &Workflow) -> bool {
    holders(ctx, &workflow.key)
        .iter()
        .any(|context| context.starts_with(&workflow.context_mark()))
}

/// Waits until the queue at `key` is these workflows, in this order.
fn wait_queue(ctx: &Ctx, key: &str, workflows: &[&Workflow]) {
    let marks: Vec<String> = workflows.iter().map(|w| w.context_mark()).collect();
    wait_until(&format!("the queue to be {marks:?}"), PROMPT, || {
        let queue = queued(ctx, key);
        queue.len() == marks.len()
            && queue
                .iter()
                .zip(&marks)
                .all(|(context, mark)| context.starts_with(mark))
    });
}

fn assert_stderr(done: &Done, text: &str) {
    assert!(
        done.stderr.contains(text),
        "stderr should say {text:?}:\n{}",
        done.describe()
    );
}

// ----- an HTTP receiver (Slack, the CircleCI API) -----

/// One request the receiver got: method, path, headers (names in lower case), body.
#[derive(Clone, Debug)]
struct Request {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: String,
}

/// A receiver on 127.0.0.1 that answers every request 200 and keeps it.
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Request>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let kept = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || {
                    if let Some(request) = read_request(&stream) {
                        kept.lock().unwrap().push(request);
                        let mut stream = stream;
                        let _ = stream.write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
                        );
                    }
                });
            }
        });
        Receiver { port, got }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn requests(&self, path_prefix: &str) -> Vec<Request> {
        let got = self.got.lock().unwrap();
        got.iter()
            .filter(|request| request.path.starts_with(path_prefix))
            .cloned()
            .collect()
    }
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let mut parts = request_line.split(' ');
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

// ----- the scenarios -----

#[test]
fn a_workflow_takes_its_turn_keeps_it_on_a_rerun_and_ends_it_once() {
    for_each_orb_store(|ctx| {
        let repo = Repo::new(ctx);
        let sha = repo.commit(BASE_UNIX, "ship the login page");
        let key = ctx.key("deploy/production");
        let workflow = Workflow::new(ctx, &repo, &key, &sha, "a");

        let waited = workflow.run("wait-in-queue", &[]);
        waited.assert_code(0);
        assert_stderr(&waited, "holds the turn");
        assert!(turn_token(ctx, &workflow).is_some(), "left for exit-queue");
        let holder = ctx.key_view(&key).holders();
        assert_eq!(holder.len(), 1, "{:?}", holder);
        assert!(
            holder[0].context.starts_with(&workflow.context_mark())
                && holder[0].context.contains(&sha[..12])
                && holder[0].context.contains("by alice"),
            "baton's context names the workflow, commit and user: {}",
            holder[0].context
        );
        assert!(
            !waited.stdout.contains("t-") && !waited.stderr.contains(&holder[0].id),
            "the token stays out of the log:\n{}",
            waited.describe()
        );

        // A rerun of wait-in-queue in the same workflow keeps the turn it has.
        let rerun = workflow.run("wait-in-queue", &[]);
        rerun.assert_code(0);
        assert_stderr(&rerun, "already holds its turn");
        let after = ctx.key_view(&key).holders();
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].id, holder[0].id, "the same turn");
        assert!(ctx.key_view(&key).queue().is_empty());

        let ended = workflow.exit("on_success", &[]);
        ended.assert_code(0);
        assert_stderr(&ended, "succeeded (on_success)");
        let log = ctx.history(&key);
        assert_eq!(log.len(), 1, "{log:#?}");
        assert_eq!(log[0]["outcome"], "succeeded");
        assert_eq!(log[0]["id"], holder[0].id.as_str());
        assert_eq!(
            log[0]["order"],
            format!("{BASE_UNIX:012}"),
            "ordered by the commit's time"
        );
        let view = ctx.key_view(&key);
        assert!(view.holders().is_empty());
        assert_eq!(view.last_outcome().as_deref(), Some("succeeded"));
        assert_eq!(turn_token(ctx, &workflow), None, "the record was emptied");

        // A second exit-queue of the workflow (another branch's last job) does nothing.
        let again = workflow.exit("on_success", &[]);
        again.assert_code(0);
        assert_stderr(&again, "Nothing to do");
        assert_eq!(ctx.history(&key).len(), 1);
    });
}

#[test]
fn of_two_exit_queue_jobs_at_once_one_ends_the_turn() {
    for_each_orb_store(|ctx| {
        let repo = Repo::new(ctx);
        let sha = repo.commit(BASE_UNIX, "two branches");
        let key = ctx.key("deploy/production");
        let workflow = Workflow::new(ctx, &repo, &key, &sha, "branches");
        workflow.take_turn(&[]);
        let exits: Vec<_> = (0..2)
            .map(|_| {
                workflow
                    .step("exit-queue", &[("PARAM_EXIT_CONDITION", "on_success")])
                    .spawn()
            })
            .collect();
        let mut n_ended = 0;
        for mut exit in exits {
            let done = exit.wait(PROMPT);
            done.assert_code(0);
            if done.stderr.contains("ended workflow") {
                n_ended += 1;
            } else {
                assert_stderr(&done, "Nothing to do");
            }
        }
        assert_eq!(n_ended, 1, "one of them ended the turn");
        assert_eq!(outcomes(ctx, &key), ["succeeded"]);
    });
}

#[test]
fn through_baton_serve_a_lock_token_is_enough() {
    common::with_fresh_sqlite(|ctx| {
        let made = ctx
            .baton([
                "tokens",
                "new",
                "circleci",
                "--json",
                "--scope",
                &format!("lock:{}", ctx.prefix),
                "--scope",
                &format!("lock:circleci/turn/{}", ctx.prefix),
            ])
            .run();
        made.assert_code(0);
        let made: Value = serde_json::from_str(made.stdout.trim()).unwrap();
        let file = serde_json::json!({ "tokens": [made["entry"]] }).to_string();
        std::fs::write(ctx.path("tokens.json"), file).unwrap();
        let tokens = ctx.path("tokens.json");
        let (_server, address) = ctx.serve(&["--tokens", tokens.to_str().unwrap()]);
        let url = format!("http://{address}");
        let token = made["token"].as_str().unwrap();
        let through = [("BATON_STORE", url.as_str()), ("BATON_TOKEN", token)];

        let repo = Repo::new(ctx);
        let sha = repo.commit(BASE_UNIX, "through the server");
        let key = ctx.key("deploy/production");
        let broken = Workflow::new(ctx, &repo, &key, &sha, "broken");
        broken.take_turn(&through);
        broken.exit("on_fail", &through).assert_code(0);
        let fixed = Workflow::new(ctx, &repo, &key, &sha, "fixed");
        fixed.take_turn(&through);
        // Adding a notify rule takes an admin token: a warning, and the turn still ends.
        let mut with_slack = through.to_vec();
        with_slack.extend_from_slice(&[
            ("PARAM_SEND_SLACK_ON_RECOVERY", "true"),
            ("SLACK_WEBHOOK", "https://hooks.slack.com/services/T0/B0/x"),
        ]);
        let ended = fixed.exit("on_success", &with_slack);
        ended.assert_code(0);
        assert_stderr(&ended, "could not add the notify rule");
        assert_stderr(&ended, "baton notify add --name circleci-recovered-");
        assert_eq!(outcomes(ctx, &key), ["succeeded", "failed"]);
        // No BATON_TOKEN: the job's OIDC ID token ($CIRCLE_OIDC_TOKEN_V2) is the bearer token
        // (here one the server knows from its tokens file; what a server started with --trust
        // does with a real one is baton-server's tests/trust.rs).
        let by_oidc = [
            ("BATON_STORE", url.as_str()),
            ("CIRCLE_OIDC_TOKEN_V2", token),
        ];
        let oidc = Workflow::new(ctx, &repo, &key, &sha, "oidc");
        oidc.take_turn(&by_oidc);
        oidc.exit("on_success", &by_oidc).assert_code(0);
        assert_eq!(outcomes(ctx, &key), ["succeeded", "succeeded", "failed"]);
    });
}

#[test]
fn exit_queue_records_failed_on_fail_and_whichever_it_was_with_always() {
    for_each_orb_store(|ctx| {
        let repo = Repo::new(ctx);
        let sha = repo.commit(BASE_UNIX, "change");
        let key = ctx.key("deploy/staging");

        let failing = Workflow::new(ctx, &repo, &key, &sha, "onfail");
        failing.take_turn(&[]);
        failing.exit("on_fail", &[]).assert_code(0);
        assert_eq!(outcomes(ctx, &key), ["failed"]);

        // exit_condition: always, in a job an earlier step of which failed: the command's
        // note-failure step (when: on_fail) leaves the mark that says so.
        let always_failed = Workflow::new(ctx, &repo, &key, &sha, "alwaysfailed");
        always_failed.take_turn(&[]);
        always_failed.run("note-failure", &[]).assert_code(0);
        always_failed.exit("always", &[]).assert_code(0);
        let always_ok = Workflow::new(ctx, &repo, &key, &sha, "alwaysok");
        always_ok.take_turn(&[]);
        always_ok.exit("always", &[]).assert_code(0);
        // An outcome given outright wins.
        let cancelled = Workflow::new(ctx, &repo, &key, &sha, "cancelled");
        cancelled.take_turn(&[]);
        cancelled
            .exit("on_success", &[("PARAM_OUTCOME", "cancelled")])
            .assert_code(0);

        assert_eq!(
            outcomes(ctx, &key),
            ["cancelled", "succeeded", "failed", "failed"],
            "newest first"
        );
    });
}

#[test]
fn workflows_queue_in_the_order_of_their_commits_times() {
    for_each_orb_store(|ctx| {
        let repo = Repo::new(ctx);
        let first_sha = repo.commit(BASE_UNIX, "first");
        let older_sha = repo.commit(BASE_UNIX + 100, "older");
        let newer_sha = repo.commit(BASE_UNIX + 200, "newer");
        let key = ctx.key("deploy/production");
        let first = Workflow::new(ctx, &repo, &key, &first_sha, "first");
        let older = Workflow::new(ctx, &repo, &key, &older_sha, "older");
        let newer = Workflow::new(ctx, &repo, &key, &newer_sha, "newer");
        let no_squash = [("PARAM_SQUASH", "false")];

        first.take_turn(&[]);
        // The newer commit's workflow arrives first; the older one still goes ahead of it.
        let mut newer_wait = newer.step("wait-in-queue", &no_squash).spawn();
        wait_queue(ctx, &key, &[&newer]);
        let mut older_wait = older.step("wait-in-queue", &no_squash).spawn();
        wait_queue(ctx, &key, &[&older, &newer]);

        first.exit("on_success", &[]).assert_code(0);
        older_wait.wait(PROMPT).assert_code(0);
        assert!(holds(ctx, &older), "{:?}", holders(ctx, &key));
        assert!(!newer_wait.has_exited(), "the newer one still waits");
        older.exit("on_success", &[]).assert_code(0);
        newer_wait.wait(PROMPT).assert_code(0);
        newer.exit("on_success", &[]).assert_code(0);

        let orders: Vec<String> = ctx
            .history(&key)
            .iter()
            .rev()
            .map(|entry| entry["order"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            orders,
            [
                format!("{BASE_UNIX:012}"),
                format!("{:012}", BASE_UNIX + 100),
                format!("{:012}", BASE_UNIX + 200)
            ],
            "turns in commit-time order"
        );
    });
}

#[test]
fn a_newer_commit_squashes_older_queued_workflows_unless_forced() {
    let api = Receiver::start();
    for_each_orb_store(|ctx| {
        let repo = Repo::new(ctx);
        let key = ctx.key("deploy/production");
        let holding_sha = repo.commit(BASE_UNIX, "running");
        let failing_sha = repo.commit(BASE_UNIX + 10, "fix a typo");
        let halting_sha = repo.commit(BASE_UNIX + 20, "bump a dependency");
        let cancelling_sha = repo.commit(BASE_UNIX + 30, "tweak the footer");
        let forced_sha = repo.commit(BASE_UNIX + 40, "add a column\n\n[force deploy] migrates");
        let newest_sha = repo.commit(BASE_UNIX + 50, "newest");
        let holding = Workflow::new(ctx, &repo, &key, &holding_sha, "holding");
        let failing = Workflow::new(ctx, &repo, &key, &failing_sha, "failing");
        let halting = Workflow::new(ctx, &repo, &key, &halting_sha, "halting");
        let cancelling = Workflow::new(ctx, &repo, &key, &cancelling_sha, "cancelling");
        let forced = Workflow::new(ctx, &repo, &key, &forced_sha, "forced");
        let newest = Workflow::new(ctx, &repo, &key, &newest_sha, "newest");

        holding.take_turn(&[]);
        // The older workflows arrive newest first (each squashes nothing older than itself).
        let mut forced_wait = forced
            .step("wait-in-queue", &[("PARAM_ON_SUPERSEDED", "fail")])
            .spawn();
        wait_queue(ctx, &key, &[&forced]);
        let api_base = api.url("/api/v2");
        let mut cancelling_wait = cancelling
            .step(
                "wait-in-queue",
                &[
                    ("PARAM_CIRCLE_TOKEN", "MY_CIRCLE_TOKEN"),
                    ("MY_CIRCLE_TOKEN", "secret-api-token"),
                    ("PARAM_CIRCLECI_API", &api_base),
                ],
            )
            .spawn();
        wait_queue(ctx, &key, &[&cancelling, &forced]);
        let mut halting_wait = halting
            .step("wait-in-queue", &[("PARAM_ON_SUPERSEDED", "halt")])
            .spawn();
        wait_queue(ctx, &key, &[&halting, &cancelling, &forced]);
        let mut failing_wait = failing
            .step("wait-in-queue", &[("PARAM_ON_SUPERSEDED", "fail")])
            .spawn();
        wait_queue(ctx, &key, &[&failing, &halting, &cancelling, &forced]);

        let mut newest_wait = newest.step("wait-in-queue", &[]).spawn();
        let failed = failing_wait.wait(PROMPT);
        failed.assert_code(1);
        assert_stderr(&failed, "superseded at");
        assert_stderr(&failed, "failing this job");
        let halted = halting_wait.wait(PROMPT);
        halted.assert_code(0);
        assert_stderr(&halted, "halting this job");
        let cancelled = cancelling_wait.wait(PROMPT);
        cancelled.assert_code(0);
        assert_stderr(&cancelled, &format!("cancelled workflow {}", cancelling.id));
        assert!(
            !cancelled.stderr.contains("secret-api-token"),
            "{}",
            cancelled.describe()
        );
        let posts = api.requests(&format!("/api/v2/workflow/{}/", cancelling.id));
        assert_eq!(posts.len(), 1, "{posts:?}");
        assert_eq!(posts[0].method, "POST");
        assert!(posts[0].path.ends_with("/cancel"), "{posts:?}");
        assert_eq!(
            posts[0].headers.get("circle-token").map(String::as_str),
            Some("secret-api-token")
        );
        // The forced workflow is still queued, ahead of the newest one; the squashed ones hold
        // no turn, and their exit-queue does nothing.
        wait_queue(ctx, &key, &[&forced, &newest]);
        for squashed in [&failing, &halting, &cancelling] {
            assert_eq!(turn_token(ctx, squashed), None, "{}", squashed.id);
            let exit = squashed.exit("on_fail", &[]);
            exit.assert_code(0);
            assert_stderr(&exit, "Nothing to do");
        }

        holding.exit("on_success", &[]).assert_code(0);
        forced_wait.wait(PROMPT).assert_code(0);
        forced.exit("on_success", &[]).assert_code(0);
        newest_wait.wait(PROMPT).assert_code(0);
        newest.exit("on_success", &[]).assert_code(0);

        let log = ctx.history(&key);
        let outcome_of = |workflow: &Workflow| -> String {
            let entry = log
                .iter()
                .find(|entry| {
                    entry["context"]
                        .as_str()
                        .is_some_and(|c| c.starts_with(&workflow.context_mark()))
                })
                .unwrap_or_else(|| panic!("{} is in the log: {log:#?}", workflow.id));
            entry["outcome"].as_str().unwrap().to_owned()
        };
        for squashed in [&failing, &halting, &cancelling] {
            assert_eq!(outcome_of(squashed), "superseded", "{}", squashed.id);
        }
        for ran in [&holding, &forced, &newest] {
            assert_eq!(outcome_of(ran), "succeeded", "{}", ran.id);
        }
    });
}

#[test]
fn kv_set_and_kv_get_print_and_export_a_value_as_it_was() {
    for_each_orb_store(|ctx| {
        let repo = Repo::new(ctx);
        let sha = repo.commit(BASE_UNIX, "build");
        let workflow = Workflow::new(ctx, &repo, &ctx.key("deploy"), &sha, "kv");
        let name = ctx.key("ci/image");
        let value = "-it's \"quoted\",  two  spaces, $HOME, `ticks` and a \\ backslash";

        let set = workflow.run(
            "kv-set",
            &[
                ("PARAM_NAME", &name),
                ("PARAM_VALUE", value),
                ("PARAM_TTL", "1h"),
            ],
        );
        set.assert_code(0);
        assert_stderr(&set, "version 1");
        let listed = ctx.baton(["kv", "ls", &name, "--json"]).run();
        listed.assert_code(0);
        let row: Value = serde_json::from_str(listed.stdout.trim()).unwrap();
        assert!(row["expires_at"].is_string(), "the ttl was given: {row}");

        let printed = workflow.run("kv-get", &[("PARAM_NAME", &name)]);
        printed.assert_code(0);
        assert_eq!(printed.stdout, format!("{value}\n"));

        std::fs::write(&workflow.bash_env, "export EARLIER=kept\n").unwrap();
        workflow
            .run(
                "kv-get",
                &[("PARAM_NAME", &name), ("PARAM_ENV_VAR", "APP_IMAGE")],
            )
            .assert_code(0);
        let sourced = ctx
            .sh(
                "source",
                ". \"$BASH_ENV\"; printf '%s|%s' \"$EARLIER\" \"$APP_IMAGE\"",
            )
            .env("BASH_ENV", &workflow.bash_env)
            .run();
        sourced.assert_code(0);
        assert_eq!(sourced.stdout, format!("kept|{value}"));

        let missing = workflow.run("kv-get", &[("PARAM_NAME", &ctx.key("ci/nothing"))]);
        missing.assert_code(1);
        assert_stderr(&missing, "there is no value");
        let bad_var = workflow.run(
            "kv-get",
            &[("PARAM_NAME", &name), ("PARAM_ENV_VAR", "1-NOT-A-NAME")],
        );
        bad_var.assert_code(1);
        assert_stderr(&bad_var, "is not an environment variable name");
    });
}

#[test]
fn send_slack_on_recovery_posts_recovered_after_a_failed_workflow() {
    let slack = Receiver::start();
    for_each_orb_store(|ctx| {
        let repo = Repo::new(ctx);
        let sha = repo.commit(BASE_UNIX, "deploy");
        let key = ctx.key("deploy/production");
        let path = format!("/services/{}", random_hex());
        let hook = slack.url(&format!("{path}?slack=1"));
        let with_slack = [
            ("PARAM_SEND_SLACK_ON_RECOVERY", "true"),
            ("PARAM_SLACK_WEBHOOK", "DEPLOY_SLACK_WEBHOOK"),
            ("DEPLOY_SLACK_WEBHOOK", hook.as_str()),
        ];

        let broken = Workflow::new(ctx, &repo, &key, &sha, "broken");
        broken.take_turn(&[]);
        broken.exit("on_fail", &[]).assert_code(0);
        let fixed = Workflow::new(ctx, &repo, &key, &sha, "fixed");
        fixed.take_turn(&[]);
        let ended = fixed.exit("on_success", &with_slack);
        ended.assert_code(0);
        assert_stderr(&ended, "added notify rule");
        assert!(
            !ended.stderr.contains(&path),
            "the webhook's secret path stays out of the log:\n{}",
            ended.describe()
        );

        // Posted by the release itself, or else by the next `baton notify deliver`.
        let texts = wait_for("the recovered message", PROMPT, || {
            let texts: Vec<String> = slack
                .requests(&path)
                .iter()
                .map(|request| {
                    let body: Value = serde_json::from_str(&request.body).unwrap();
                    body["text"].as_str().unwrap_or_default().to_owned()
                })
                .collect();
            if texts.is_empty() {
                ctx.baton(["notify", "deliver"]).run();
                return None;
            }
            Some(texts)
        });
        assert!(
            texts[0].contains(&key) && texts[0].contains("recovered"),
            "{texts:?}"
        );
        assert!(texts[0].contains(&fixed.id), "{texts:?}");

        // Another success is no recovery, and the rule is kept as it is; a webhook variable
        // left empty is a warning only.
        let again = Workflow::new(ctx, &repo, &key, &sha, "again");
        again.take_turn(&[]);
        let kept = again.exit("on_success", &with_slack);
        kept.assert_code(0);
        assert_stderr(&kept, "Slack hears of a recovery");
        let unset_var = Workflow::new(ctx, &repo, &key, &sha, "unset");
        unset_var.take_turn(&[]);
        let unset = unset_var.exit(
            "on_success",
            &[
                ("PARAM_SEND_SLACK_ON_RECOVERY", "true"),
                ("PARAM_SLACK_WEBHOOK", "NO_SUCH_WEBHOOK_VARIABLE"),
            ],
        );
        unset.assert_code(0);
        assert_stderr(&unset, "no Slack message");
        assert_eq!(
            outcomes(ctx, &key),
            ["succeeded", "succeeded", "succeeded", "failed"]
        );
        ctx.baton(["notify", "deliver"]).run().assert_code(0);
        assert_eq!(slack.requests(&path).len(), 1, "recovered once");

        // The rule exit-queue added is the key's own: remove it (stores may be shared).
        let rules = ctx.baton(["notify", "ls", "--json"]).run();
        rules.assert_code(0);
        let rule = rules
            .stdout
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .find(|rule| rule["prefix"] == key.as_str())
            .unwrap_or_else(|| panic!("a rule for {key}:\n{}", rules.stdout));
        assert_eq!(rule["events"], serde_json::json!(["recovered"]));
        ctx.baton(["notify", "rm", rule["name"].as_str().unwrap()])
            .run()
            .assert_code(0);
    });
}

#[test]
fn a_missing_key_store_or_workflow_id_fails_with_a_clear_message() {
    common::with_fresh_sqlite(|ctx| {
        let repo = Repo::new(ctx);
        let sha = repo.commit(BASE_UNIX, "x");
        let key = ctx.key("deploy");
        let workflow = Workflow::new(ctx, &repo, &key, &sha, "broken");
        // Exit 1 and one line that says what is missing.
        let refused = |script: &str, prelude: &str, params: &[(&str, &str)], message: &str| {
            let done = workflow.step_with(script, params, prelude).run();
            done.assert_code(1);
            assert_stderr(&done, &format!("baton orb: error: {message}"));
        };
        refused("wait-in-queue", "unset WORKFLOW_LOCK_KEY;", &[], "no key");
        refused("exit-queue", "unset WORKFLOW_LOCK_KEY;", &[], "no key");
        refused("wait-in-queue", "unset BATON_STORE;", &[], "no store");
        let named = [("PARAM_NAME", "n")];
        refused("kv-set", "unset BATON_STORE;", &named, "no store");
        refused(
            "wait-in-queue",
            "unset CIRCLE_WORKFLOW_ID CIRCLE_WORKFLOW_WORKSPACE_ID;",
            &[],
            "CIRCLE_WORKFLOW_ID is not set",
        );
        refused(
            "exit-queue",
            "",
            &[("PARAM_EXIT_CONDITION", "sometimes")],
            "exit_condition must be on_success, on_fail or always",
        );
        refused("kv-get", "", &[], "no name");
        assert!(ctx.key_status(&key).is_none(), "nothing was queued");
    });
}

#[test]
fn install_runs_baton_install_script_and_puts_baton_on_path_for_later_steps() {
    common::with_fresh_sqlite(|ctx| {
        // A PATH of the tools install.sh uses, and no baton.
        let tools = ctx.path("tools");
        std::fs::create_dir_all(&tools).unwrap();
        for tool in [
            "sh", "bash", "curl", "mktemp", "rm", "tail", "dirname", "mkdir", "ln", "cat",
        ] {
            let found = ["/usr/bin", "/bin", "/usr/local/bin"]
                .iter()
                .map(|dir| Path::new(dir).join(tool))
                .find(|path| path.exists())
                .unwrap_or_else(|| panic!("{tool} is installed"));
            std::os::unix::fs::symlink(found, tools.join(tool)).unwrap();
        }
        // An install.sh that keeps the contract of the repository's: options --version, --url,
        // --dir; messages on stderr; the installed binary's absolute path as stdout's last line.
        let fake = ctx.path("install.sh");
        std::fs::write(
            &fake,
            r#"#!/bin/sh
set -eu
printf '%s\n' "$*" >"$TEST_DIR/install-args"
dir=
while [ $# -gt 0 ]; do
    case $1 in
        --dir) dir=$2; shift ;;
    esac
    shift
done
echo "install.sh: installing" >&2
mkdir -p "$dir"
ln -s "$TEST_BATON" "$dir/baton"
echo "a line before the path"
echo "$dir/baton"
"#,
        )
        .unwrap();
        let repo = Repo::new(ctx);
        let sha = repo.commit(BASE_UNIX, "x");
        let workflow = Workflow::new(ctx, &repo, &ctx.key("k"), &sha, "install");
        let into = ctx.path("opt/baton/bin");
        let installed = workflow
            .step_with(
                "install",
                &[
                    ("PATH", tools.to_str().unwrap()),
                    (
                        "PARAM_INSTALL_SCRIPT_URL",
                        &format!("file://{}", fake.display()),
                    ),
                    ("PARAM_VERSION", "0.1.0"),
                    ("PARAM_DOWNLOAD_URL", "https://mirror.example/baton.tar.gz"),
                    ("PARAM_DIR", into.to_str().unwrap()),
                ],
                "",
            )
            .run();
        installed.assert_code(0);
        assert_stderr(&installed, "is on PATH from the next step on");
        assert_eq!(
            ctx.read("install-args").trim(),
            format!(
                "--version 0.1.0 --url https://mirror.example/baton.tar.gz --dir {}",
                into.display()
            )
        );
        // The next step (bash reads BASH_ENV, as in CircleCI) finds baton.
        let next = workflow
            .shell("next", "exec bash -c 'command -v baton && baton --version'")
            .env("PATH", &tools)
            .run();
        next.assert_code(0);
        assert!(
            next.stdout
                .starts_with(&format!("{}\n", into.join("baton").display())),
            "{}",
            next.describe()
        );
        // With baton on PATH, install does nothing; without a URL, it says what to set.
        let again = workflow.run("install", &[]);
        again.assert_code(0);
        assert_stderr(&again, "baton is already installed");
        let no_url = workflow
            .step_with("install", &[("PATH", tools.to_str().unwrap())], "")
            .run();
        no_url.assert_code(1);
        assert_stderr(&no_url, "install_script_url is empty");
    });
}

// ----- the one-job form: the commands as steps of one job, the turn kept alive -----

/// The lease of the kept-alive turns below: several pass while a test looks.
const ORB_LEASE: &str = "3s";
const ORB_LEASE_SECS: u64 = 3;
/// The longest a waiter goes without looking (baton's default `--poll`, which the orb keeps).
const ORB_POLL: Duration = Duration::from_secs(1);
/// What a loaded machine may add to "within a lease and a poll".
const ORB_SLACK: Duration = Duration::from_secs(7);

/// wait-in-queue's parameters as the command passes them by default, on a short lease.
const ONE_JOB: [(&str, &str); 2] = [("PARAM_KEEP_ALIVE", "true"), ("PARAM_LEASE", ORB_LEASE)];

/// The file in which wait-in-queue left its keeper's pid for exit-queue, in the job's TMPDIR.
fn keeper_file(workflow: &Workflow) -> Option<PathBuf> {
    std::fs::read_dir(&workflow.tmp)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("baton-orb-keeper-"))
        })
}

/// The pid of the keeper that renews `workflow`'s turn (its job's keeper file).
fn keeper_of(workflow: &Workflow) -> i32 {
    let file = keeper_file(workflow)
        .unwrap_or_else(|| panic!("no keeper file in {}", workflow.tmp.display()));
    let text = std::fs::read_to_string(&file).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{} holds no pid: {text:?}", file.display()))
}

/// Watches `key` for `how_long`: `holder` holds it and `waiter` waits, at every look (the
/// holder's lease is much shorter than that: it is being renewed).
fn kept_throughout(ctx: &Ctx, holder: &Workflow, waiter: &Workflow, how_long: Duration) {
    let started = Instant::now();
    while started.elapsed() < how_long {
        assert!(
            holds(ctx, holder),
            "{} lost the turn after {:?}: {:?}",
            holder.id,
            started.elapsed(),
            holders(ctx, &holder.key)
        );
        let queue = queued(ctx, &holder.key);
        assert!(
            queue.len() == 1 && queue[0].starts_with(&waiter.context_mark()),
            "{queue:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn the_one_job_commands_keep_the_turn_alive_until_exit_queue_ends_it() {
    for_each_orb_store(|ctx| {
        let repo = Repo::new(ctx);
        let key = ctx.key("deploy/staging");
        let first_sha = repo.commit(BASE_UNIX, "first");
        let second_sha = repo.commit(BASE_UNIX + 60, "second");
        let first = Workflow::new(ctx, &repo, &key, &first_sha, "first");
        let second = Workflow::new(ctx, &repo, &key, &second_sha, "second");

        // The first workflow's deploy job, its commands packed as CircleCI runs them.
        let mut job = MiniCircle::new(&first);
        job.command("wait-in-queue", &[("key", &key), ("lease", ORB_LEASE)]);
        assert!(!job.failed, "{:?}", job.ran);
        let pid = keeper_of(&first);
        assert!(common::pid_alive(pid), "the keeper runs after the step");
        // wait-in-queue again in the same job keeps the turn its keeper keeps.
        let again = first.run("wait-in-queue", &ONE_JOB);
        again.assert_code(0);
        assert_stderr(&again, "this job already holds");

        // The second workflow's job waits, while three of the first's leases pass.
        let mut second_wait = second.step("wait-in-queue", &ONE_JOB).spawn();
        wait_queue(ctx, &key, &[&second]);
        kept_throughout(
            ctx,
            &first,
            &second,
            Duration::from_secs(3 * ORB_LEASE_SECS),
        );

        // A step of the first job fails; exit-queue (always) ends the turn as failed, and the
        // keeper with it.
        job.failing_step();
        job.command("exit-queue", &[("key", &key), ("exit_condition", "always")]);
        assert!(
            job.ran
                .last()
                .is_some_and(|step| step.ends_with("exit Some(0)")),
            "{:?}",
            job.ran
        );
        assert!(
            !common::pid_alive(pid),
            "the keeper is gone after exit-queue"
        );

        second_wait.wait(PROMPT).assert_code(0);
        assert!(holds(ctx, &second), "{:?}", holders(ctx, &key));
        let second_pid = keeper_of(&second);
        let ended = second.exit("always", &[]);
        ended.assert_code(0);
        assert_stderr(&ended, "has ended");
        assert!(!common::pid_alive(second_pid));
        assert_eq!(outcomes(ctx, &key), ["succeeded", "failed"]);
    });
}

#[test]
fn a_one_job_runner_killed_mid_job_frees_the_key_within_a_lease_and_a_poll() {
    for_each_orb_store(|ctx| {
        let repo = Repo::new(ctx);
        let key = ctx.key("deploy/staging");
        let dead_sha = repo.commit(BASE_UNIX, "dies");
        let next_sha = repo.commit(BASE_UNIX + 60, "next");
        let dead = Workflow::new(ctx, &repo, &key, &dead_sha, "dead");
        let next = Workflow::new(ctx, &repo, &key, &next_sha, "next");
        dead.take_turn(&ONE_JOB);
        // The job's next step, the deploy, is running when the runner is lost.
        let mut deploy = dead.shell("deploy", "sleep 600").spawn();
        let mut next_wait = next.step("wait-in-queue", &ONE_JOB).spawn();
        wait_queue(ctx, &key, &[&next]);

        // Everything of the job is killed, the keeper with it; no exit-queue runs.
        let killed_at = Instant::now();
        common::send_signal(keeper_of(&dead), libc::SIGKILL);
        deploy.kill();
        next_wait.wait(PROMPT).assert_code(0);
        let freed_after = killed_at.elapsed();
        let bound = Duration::from_secs(ORB_LEASE_SECS) + ORB_POLL + ORB_SLACK;
        assert!(
            freed_after <= bound,
            "the next workflow got the key {freed_after:?} after the kill (bound {bound:?})"
        );
        assert!(holds(ctx, &next), "{:?}", holders(ctx, &key));
        assert_eq!(
            outcomes(ctx, &key),
            ["expired"],
            "the dead job's turn ran out"
        );
        next.exit("always", &[]).assert_code(0);
        assert_eq!(outcomes(ctx, &key), ["succeeded", "expired"]);
    });
}

// ----- orb.yml -----

/// orb.yml, parsed.
fn orb() -> Yaml {
    let text = std::fs::read_to_string(orb_dir().join("orb.yml")).expect("read orb.yml");
    let mut docs = YamlLoader::load_from_str(&text).expect("orb.yml is YAML");
    assert_eq!(docs.len(), 1, "orb.yml is one document");
    docs.remove(0)
}

fn hash<'y>(yaml: &'y Yaml, what: &str) -> &'y yaml_rust2::yaml::Hash {
    yaml.as_hash()
        .unwrap_or_else(|| panic!("{what} is a mapping: {yaml:?}"))
}

/// A mapping's entries with string keys.
fn entries<'y>(yaml: &'y Yaml, what: &str) -> Vec<(&'y str, &'y Yaml)> {
    hash(yaml, what)
        .iter()
        .map(|(k, v)| {
            let key = k
                .as_str()
                .unwrap_or_else(|| panic!("{what}: a key that is not a string: {k:?}"));
            (key, v)
        })
        .collect()
}

fn keys_within(yaml: &Yaml, allowed: &[&str], what: &str) {
    for (key, _) in entries(yaml, what) {
        assert!(
            allowed.contains(&key),
            "{what}: `{key}` is not one of {allowed:?}"
        );
    }
}

/// Every string in `yaml`, depth first.
fn strings<'y>(yaml: &'y Yaml, out: &mut Vec<&'y str>) {
    match yaml {
        Yaml::String(text) => out.push(text),
        Yaml::Array(items) => items.iter().for_each(|item| strings(item, out)),
        Yaml::Hash(map) => map.iter().for_each(|(k, v)| {
            strings(k, out);
            strings(v, out);
        }),
        _ => {}
    }
}

/// What each `<< ... >>` in `text` holds, trimmed.
fn references(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<<") {
        let after = &rest[start + 2..];
        match after.find(">>") {
            Some(end) => {
                found.push(after[..end].trim().to_owned());
                rest = &after[end + 2..];
            }
            None => {
                found.push(after.trim().to_owned());
                break;
            }
        }
    }
    found
}

/// A declared parameter: its type, its enum's values, whether it has a default.
struct Parameter {
    kind: String,
    choices: Vec<String>,
    has_default: bool,
}

/// The parameters a command, job or executor declares, by name.
type Parameters = BTreeMap<String, Parameter>;

const PARAMETER_TYPES: [&str; 7] = [
    "string",
    "boolean",
    "integer",
    "enum",
    "env_var_name",
    "steps",
    "executor",
];

/// The keys of a job's invocation in a workflow, besides its parameters.
const WORKFLOW_JOB_KEYS: [&str; 8] = [
    "requires",
    "context",
    "filters",
    "name",
    "matrix",
    "type",
    "pre-steps",
    "post-steps",
];

/// Checks a `parameters:` mapping; returns the declared names with their types and enum lists.
fn check_parameters(owner: &str, parameters: &Yaml, executors: &BTreeSet<String>) -> Parameters {
    let mut declared = BTreeMap::new();
    if parameters.is_badvalue() {
        return declared;
    }
    for (name, parameter) in entries(parameters, &format!("{owner}'s parameters")) {
        let what = format!("{owner}: parameter {name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'),
            "{what}: a name of letters, digits, _ and -"
        );
        keys_within(
            parameter,
            &["description", "type", "default", "enum"],
            &what,
        );
        let kind = parameter["type"]
            .as_str()
            .unwrap_or_else(|| panic!("{what} has a type"));
        assert!(PARAMETER_TYPES.contains(&kind), "{what}: type {kind}");
        assert!(
            parameter["description"]
                .as_str()
                .is_some_and(|d| !d.trim().is_empty()),
            "{what} has a description"
        );
        let choices: Vec<String> = if kind == "enum" {
            parameter["enum"]
                .as_vec()
                .unwrap_or_else(|| panic!("{what}: an enum has an `enum` list"))
                .iter()
                .map(|choice| {
                    choice
                        .as_str()
                        .unwrap_or_else(|| panic!("{what}: enum values are strings"))
                        .to_owned()
                })
                .collect()
        } else {
            assert!(
                parameter["enum"].is_badvalue(),
                "{what}: `enum` is for enums"
            );
            Vec::new()
        };
        if kind == "enum" {
            assert!(!choices.is_empty(), "{what}: an empty enum");
        }
        let default = &parameter["default"];
        let has_default = !default.is_badvalue();
        if has_default {
            let fits = match kind {
                "string" => default.as_str().is_some(),
                "boolean" => default.as_bool().is_some(),
                "integer" => default.as_i64().is_some(),
                "enum" => default
                    .as_str()
                    .is_some_and(|d| choices.iter().any(|c| c == d)),
                "env_var_name" => default.as_str().is_some_and(|d| {
                    d.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                        && d.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                }),
                "steps" => default.as_vec().is_some(),
                "executor" => default.as_str().is_some_and(|d| executors.contains(d)),
                _ => false,
            };
            assert!(fits, "{what}: the default {default:?} is not a {kind}");
        }
        declared.insert(
            name.to_owned(),
            Parameter {
                kind: kind.to_owned(),
                choices,
                has_default,
            },
        );
    }
    declared
}

/// The built-in steps a job or command may use.
const BUILT_IN_STEPS: [&str; 13] = [
    "run",
    "checkout",
    "setup_remote_docker",
    "save_cache",
    "restore_cache",
    "store_artifacts",
    "store_test_results",
    "persist_to_workspace",
    "attach_workspace",
    "add_ssh_keys",
    "when",
    "unless",
    "deploy",
];

const RUN_KEYS: [&str; 8] = [
    "name",
    "command",
    "shell",
    "environment",
    "background",
    "working_directory",
    "no_output_timeout",
    "when",
];

/// Checks a list of steps; `commands` are the orb's commands with their parameters, `prefix`
/// how they are named here (`` inside the orb, `baton/` in its examples); collects every run
/// step's command.
fn check_steps(
    owner: &str,
    steps: &Yaml,
    declared: &Parameters,
    commands: &BTreeMap<String, Parameters>,
    prefix: &str,
    run_commands: &mut Vec<(String, String)>,
) {
    let list = steps
        .as_vec()
        .unwrap_or_else(|| panic!("{owner}: steps is a list: {steps:?}"));
    assert!(!list.is_empty(), "{owner}: no steps");
    for step in list {
        let (name, args) = match step {
            Yaml::String(name) => (name.as_str(), &Yaml::BadValue),
            Yaml::Hash(map) => {
                assert_eq!(map.len(), 1, "{owner}: a step is one key: {step:?}");
                let (k, v) = map.iter().next().unwrap();
                (k.as_str().expect("a step's name is a string"), v)
            }
            other => panic!("{owner}: a step is a name or a mapping: {other:?}"),
        };
        let what = format!("{owner}: step {name}");
        if let Some(command) = name.strip_prefix(prefix).and_then(|n| commands.get(n)) {
            // A call of one of the orb's commands: only its parameters, every required one.
            let given: Vec<&str> = if args.is_badvalue() || args.is_null() {
                Vec::new()
            } else {
                entries(args, &what).into_iter().map(|(k, _)| k).collect()
            };
            for arg in &given {
                assert!(command.contains_key(*arg), "{what}: no parameter {arg}");
            }
            for (name, parameter) in command {
                assert!(
                    parameter.has_default || given.contains(&name.as_str()),
                    "{what}: the required parameter {name} is missing"
                );
            }
            continue;
        }
        assert!(
            BUILT_IN_STEPS.contains(&name),
            "{what}: neither a built-in step nor a command of the orb"
        );
        match name {
            // `run: COMMAND`, the short form.
            "run" if args.as_str().is_some() => {}
            "run" => {
                keys_within(args, &RUN_KEYS, &what);
                let command = args["command"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{what}: command is a string: {args:?}"));
                if let Some(when) = args["when"].as_str() {
                    let allowed = ["on_success", "on_fail", "always"];
                    let fits = allowed.contains(&when)
                        || references(when).iter().all(|reference| {
                            let parameter = reference.strip_prefix("parameters.").unwrap_or("");
                            declared.get(parameter).is_some_and(|parameter| {
                                parameter.kind == "enum"
                                    && parameter
                                        .choices
                                        .iter()
                                        .all(|c| allowed.contains(&c.as_str()))
                            })
                        }) && !references(when).is_empty();
                    assert!(fits, "{what}: when is {when}");
                }
                if let Some(environment) = args["environment"].as_hash() {
                    for (name, value) in environment {
                        assert!(name.as_str().is_some(), "{what}: an environment name");
                        assert!(
                            value.as_str().is_some(),
                            "{what}: environment values are strings: {value:?}"
                        );
                    }
                }
                let step_name = args["name"].as_str().unwrap_or(name).to_owned();
                run_commands.push((format!("{owner}: {step_name}"), command.to_owned()));
            }
            "when" | "unless" => {
                keys_within(args, &["condition", "steps"], &what);
                assert!(!args["condition"].is_badvalue(), "{what}: a condition");
                check_steps(
                    &what,
                    &args["steps"],
                    declared,
                    commands,
                    prefix,
                    run_commands,
                );
            }
            _ => {}
        }
    }
}

/// Checks that every `<< parameters.NAME >>` in `yaml` is declared, and that nothing else is
/// in `<< >>` (an include left unpacked, or a script's `<<`).
fn check_references(owner: &str, yaml: &Yaml, declared: &Parameters) {
    let mut texts = Vec::new();
    strings(yaml, &mut texts);
    for text in texts {
        for reference in references(text) {
            let name = reference.strip_prefix("parameters.").unwrap_or_else(|| {
                panic!("{owner}: `<< {reference} >>` is not a parameter (an include left unpacked, or a `<<` in a script?)")
            });
            assert!(
                declared.contains_key(name),
                "{owner}: `<< parameters.{name} >>` is not declared"
            );
        }
    }
}

#[test]
fn orb_yml_has_the_structure_circleci_requires() {
    let orb = orb();
    keys_within(
        &orb,
        &[
            "version",
            "description",
            "display",
            "orbs",
            "commands",
            "jobs",
            "executors",
            "examples",
        ],
        "orb.yml",
    );
    assert_eq!(orb["version"].as_f64(), Some(2.1), "version: 2.1");
    assert!(orb["description"]
        .as_str()
        .is_some_and(|d| !d.trim().is_empty()));
    keys_within(&orb["display"], &["home_url", "source_url"], "display");
    for (key, url) in entries(&orb["display"], "display") {
        assert!(
            url.as_str().is_some_and(|u| u.starts_with("https://")),
            "display.{key}"
        );
    }

    let executors: BTreeSet<String> = entries(&orb["executors"], "executors")
        .into_iter()
        .map(|(name, _)| name.to_owned())
        .collect();
    for (name, executor) in entries(&orb["executors"], "executors") {
        let owner = format!("executor {name}");
        keys_within(
            executor,
            &[
                "description",
                "parameters",
                "docker",
                "machine",
                "macos",
                "resource_class",
                "environment",
                "working_directory",
                "shell",
            ],
            &owner,
        );
        let kinds = ["docker", "machine", "macos"]
            .iter()
            .filter(|kind| !executor[**kind].is_badvalue())
            .count();
        assert_eq!(kinds, 1, "{owner}: one of docker, machine, macos");
        if let Some(images) = executor["docker"].as_vec() {
            assert!(images.iter().all(|image| image["image"].as_str().is_some()));
        }
        let declared = check_parameters(&owner, &executor["parameters"], &executors);
        check_references(&owner, executor, &declared);
    }

    let mut commands = BTreeMap::new();
    for (name, command) in entries(&orb["commands"], "commands") {
        let owner = format!("command {name}");
        keys_within(command, &["description", "parameters", "steps"], &owner);
        let declared = check_parameters(&owner, &command["parameters"], &executors);
        commands.insert(name.to_owned(), declared);
    }
    for wanted in ["install", "wait-in-queue", "exit-queue", "kv-set", "kv-get"] {
        assert!(commands.contains_key(wanted), "the command {wanted}");
    }
    let mut run_commands = Vec::new();
    for (name, command) in entries(&orb["commands"], "commands") {
        let owner = format!("command {name}");
        let declared = &commands[name];
        check_steps(
            &owner,
            &command["steps"],
            declared,
            &commands,
            "",
            &mut run_commands,
        );
        check_references(&owner, command, declared);
    }

    let mut jobs = BTreeMap::new();
    for (name, job) in entries(&orb["jobs"], "jobs") {
        let owner = format!("job {name}");
        keys_within(
            job,
            &[
                "description",
                "parameters",
                "steps",
                "executor",
                "docker",
                "machine",
                "macos",
                "resource_class",
                "environment",
                "working_directory",
                "parallelism",
                "shell",
                "circleci_ip_ranges",
            ],
            &owner,
        );
        let kinds = ["executor", "docker", "machine", "macos"]
            .iter()
            .filter(|kind| !job[**kind].is_badvalue())
            .count();
        assert_eq!(kinds, 1, "{owner}: an executor (or docker, machine, macos)");
        let declared = check_parameters(&owner, &job["parameters"], &executors);
        // A job's invocation in a workflow takes these keys itself: a parameter of the same
        // name could never be passed (`context: deploy` names a CircleCI context).
        for reserved in WORKFLOW_JOB_KEYS {
            assert!(
                !declared.contains_key(reserved),
                "{owner}: a parameter named {reserved}, a key of the job's invocation"
            );
        }
        if let Some(executor) = job["executor"].as_str() {
            let named = match references(executor).as_slice() {
                [reference] => {
                    let parameter = reference.strip_prefix("parameters.").unwrap();
                    assert_eq!(declared[parameter].kind, "executor", "{owner}: {executor}");
                    None
                }
                _ => Some(executor),
            };
            if let Some(named) = named {
                assert!(executors.contains(named), "{owner}: executor {named}");
            }
        }
        check_steps(
            &owner,
            &job["steps"],
            &declared,
            &commands,
            "",
            &mut run_commands,
        );
        check_references(&owner, job, &declared);
        jobs.insert(name.to_owned(), declared);
    }
    for wanted in ["wait-in-queue", "exit-queue"] {
        assert!(jobs.contains_key(wanted), "the job {wanted}");
    }

    // The exit-queue command runs when its exit_condition says.
    let exit_queue = &orb["commands"]["exit-queue"];
    let exit_condition = &exit_queue["parameters"]["exit_condition"];
    assert_eq!(exit_condition["type"].as_str(), Some("enum"));
    assert_eq!(
        exit_condition["enum"].as_vec().map(|v| v.len()),
        Some(3),
        "on_success, on_fail, always"
    );
    let last = exit_queue["steps"].as_vec().unwrap().last().unwrap();
    assert_eq!(
        last["run"]["when"].as_str(),
        Some("<< parameters.exit_condition >>")
    );

    // Every run step's command is a shell script sh can read, with nothing left to include.
    assert!(run_commands.len() >= 6, "{run_commands:?}");
    let scratch = tempfile::tempdir().unwrap();
    for (index, (owner, command)) in run_commands.iter().enumerate() {
        assert!(!command.contains("include("), "{owner}: an include left");
        assert!(
            !command.contains("dirname -- \"$0\""),
            "{owner}: lib.sh is inlined, not sourced"
        );
        let path = scratch.path().join(format!("{index}.sh"));
        std::fs::write(&path, command).unwrap();
        let checked = std::process::Command::new("sh")
            .arg("-n")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            checked.status.success(),
            "{owner}: sh -n: {}",
            String::from_utf8_lossy(&checked.stderr)
        );
    }

    // The README documents every command, job and parameter.
    let readme = std::fs::read_to_string(orb_dir().join("README.md")).expect("the orb's README");
    for section in ["commands", "jobs", "executors"] {
        for (name, entry) in entries(&orb[section], section) {
            assert!(
                readme.contains(&format!("`{name}`")),
                "README.md names the {section} entry `{name}`"
            );
            for (parameter, _) in entry["parameters"].as_hash().into_iter().flatten() {
                let parameter = parameter.as_str().unwrap();
                assert!(
                    readme.contains(&format!("`{parameter}`")),
                    "README.md documents `{parameter}` of {section} {name}"
                );
            }
        }
    }

    // The examples: a description, and a usage that is a config of its own using the orb.
    let examples = entries(&orb["examples"], "examples");
    assert!(!examples.is_empty(), "examples");
    for (name, example) in examples {
        let owner = format!("example {name}");
        keys_within(example, &["description", "usage", "result"], &owner);
        assert!(example["description"].as_str().is_some(), "{owner}");
        let usage = &example["usage"];
        assert_eq!(usage["version"].as_f64(), Some(2.1), "{owner}: version 2.1");
        assert!(
            usage["orbs"]["baton"]
                .as_str()
                .is_some_and(|o| o.starts_with("baton-locks/baton@")),
            "{owner}: uses the orb as baton"
        );
        for (job_name, job) in usage["jobs"].as_hash().into_iter().flatten() {
            let job_owner = format!("{owner}: job {}", job_name.as_str().unwrap());
            let mut ignored = Vec::new();
            check_steps(
                &job_owner,
                &job["steps"],
                &BTreeMap::new(),
                &commands,
                "baton/",
                &mut ignored,
            );
        }
        for (workflow_name, workflow) in usage["workflows"].as_hash().into_iter().flatten() {
            for entry in workflow["jobs"].as_vec().into_iter().flatten() {
                let (job_name, args) = match entry {
                    Yaml::String(job_name) => (job_name.as_str(), &Yaml::BadValue),
                    Yaml::Hash(map) => {
                        let (k, v) = map.iter().next().unwrap();
                        (k.as_str().unwrap(), v)
                    }
                    other => panic!("{owner}: a workflow's job: {other:?}"),
                };
                let Some(orb_job) = job_name.strip_prefix("baton/") else {
                    assert!(
                        !usage["jobs"][job_name].is_badvalue(),
                        "{owner}: workflow {workflow_name:?} runs the undefined job {job_name}"
                    );
                    continue;
                };
                let declared = jobs
                    .get(orb_job)
                    .unwrap_or_else(|| panic!("{owner}: the orb has no job {orb_job}"));
                for (arg, _) in args.as_hash().into_iter().flatten() {
                    let arg = arg.as_str().unwrap();
                    assert!(
                        WORKFLOW_JOB_KEYS.contains(&arg) || declared.contains_key(arg),
                        "{owner}: job {orb_job} has no parameter {arg}"
                    );
                }
            }
        }
    }
}

#[test]
fn pack_check_passes_and_catches_a_stale_orb_yml() {
    common::with_fresh_sqlite(|ctx| {
        let pack = |dir: &Path, args: &str| {
            ctx.sh(
                "pack",
                &format!("exec sh \"$ORB_DIR/scripts/pack.sh\" {args}"),
            )
            .env("ORB_DIR", dir)
            .run()
        };
        let checked = pack(&orb_dir(), "--check");
        checked.assert_code(0);
        assert_stderr(&checked, "up to date");

        // A copy, made stale, changed and packed again.
        let copy = ctx.path("orb");
        for sub in [
            "src/commands",
            "src/jobs",
            "src/executors",
            "src/examples",
            "scripts",
        ] {
            std::fs::create_dir_all(copy.join(sub)).unwrap();
            for entry in std::fs::read_dir(orb_dir().join(sub)).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), copy.join(sub).join(entry.file_name())).unwrap();
            }
        }
        for file in ["src/@orb.yml", "orb.yml"] {
            std::fs::copy(orb_dir().join(file), copy.join(file)).unwrap();
        }
        let packed = std::fs::read_to_string(copy.join("orb.yml")).unwrap();
        common::append_line(&copy.join("scripts/kv-set.sh"), "echo one more line");
        let stale = pack(&copy, "--check");
        stale.assert_code(1);
        assert_stderr(&stale, "orb.yml is out of date");
        assert_stderr(&stale, "+            echo one more line");
        pack(&copy, "").assert_code(0);
        pack(&copy, "--check").assert_code(0);
        let repacked = std::fs::read_to_string(copy.join("orb.yml")).unwrap();
        let last_line = "            orb_say \"set $name (version $version)\"\n";
        assert!(packed.contains(last_line), "kv-set.sh's last line moved");
        assert!(
            repacked
                == packed.replacen(
                    last_line,
                    &format!("{last_line}            echo one more line\n"),
                    1
                ),
            "packing is deterministic and only the change differs (see {})",
            copy.display()
        );

        // A script with `<<` (CircleCI would read it as a parameter) is refused.
        common::append_line(&copy.join("scripts/kv-get.sh"), "cat <<EOF");
        let refused = pack(&copy, "");
        refused.assert_code(1);
        assert_stderr(&refused, "scripts/kv-get.sh");
        assert_stderr(&refused, "would be read by CircleCI as a parameter");
        assert!(
            std::fs::read_to_string(copy.join("orb.yml")).unwrap() == repacked,
            "orb.yml is unchanged"
        );
    });
}

// ----- the packed orb, run as CircleCI runs it -----

/// A small CircleCI: runs a job or command of orb.yml with the given parameters, filling in
/// `<< parameters.NAME >>`, obeying each run step's `when` and the `when` steps' conditions,
/// running each command with `bash -eo pipefail -c` (CircleCI's default shell) in the
/// workflow's job environment.
struct MiniCircle<'w, 'c> {
    orb: Yaml,
    workflow: &'w Workflow<'c>,
    /// Whether a step of the job has failed.
    failed: bool,
    /// Steps run, by name: what the job's log would list.
    ran: Vec<String>,
}

impl<'w, 'c> MiniCircle<'w, 'c> {
    fn new(workflow: &'w Workflow<'c>) -> MiniCircle<'w, 'c> {
        MiniCircle {
            orb: orb(),
            workflow,
            failed: false,
            ran: Vec::new(),
        }
    }

    /// Runs the orb's job `name`.
    fn job(&mut self, name: &str, args: &[(&str, &str)]) {
        let job = self.orb["jobs"][name].clone();
        let values = bind(&job["parameters"], args);
        self.steps(&job["steps"], &values);
    }

    /// Runs the orb's command `name`, as a step of a job.
    fn command(&mut self, name: &str, args: &[(&str, &str)]) {
        let command = self.orb["commands"][name].clone();
        let values = bind(&command["parameters"], args);
        self.steps(&command["steps"], &values);
    }

    /// A step of the job's own that fails (`run: exit 1`).
    fn failing_step(&mut self) {
        self.failed = true;
        self.ran.push("a failing step".to_owned());
    }

    fn steps(&mut self, steps: &Yaml, values: &BTreeMap<String, String>) {
        for step in steps.as_vec().unwrap() {
            let (name, args) = match step {
                Yaml::String(name) => (name.clone(), Yaml::BadValue),
                Yaml::Hash(map) => {
                    let (k, v) = map.iter().next().unwrap();
                    (k.as_str().unwrap().to_owned(), v.clone())
                }
                other => panic!("a step: {other:?}"),
            };
            match name.as_str() {
                // The test's repository is the checkout.
                "checkout" => {}
                "when" => {
                    if condition(&args["condition"], values) {
                        self.steps(&args["steps"], values);
                    }
                }
                "run" => self.run(&args, values),
                command => {
                    let mut given = Vec::new();
                    for (k, v) in args.as_hash().into_iter().flatten() {
                        given.push((k.as_str().unwrap().to_owned(), scalar(v, values)));
                    }
                    let given: Vec<(&str, &str)> = given
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    self.command(command, &given);
                }
            }
        }
    }

    fn run(&mut self, run: &Yaml, values: &BTreeMap<String, String>) {
        let when = run["when"]
            .as_str()
            .map_or("on_success".to_owned(), |w| fill(w, values));
        let due = match when.as_str() {
            "on_success" => !self.failed,
            "on_fail" => self.failed,
            "always" => true,
            other => panic!("when: {other}"),
        };
        if !due {
            return;
        }
        let name = fill(run["name"].as_str().unwrap_or("run"), values);
        let command = fill(run["command"].as_str().unwrap(), values);
        let mut env = Vec::new();
        for (k, v) in run["environment"].as_hash().into_iter().flatten() {
            env.push((k.as_str().unwrap().to_owned(), scalar(v, values)));
        }
        // bash reads BASH_ENV first (the PATH install adds), as in CircleCI.
        let mut cmd = self
            .workflow
            .shell("packed", "exec bash -eo pipefail -c \"$ORB_COMMAND\"")
            .env("ORB_COMMAND", &command);
        for (k, v) in &env {
            cmd = cmd.env(k, v);
        }
        let done = cmd.run();
        self.ran.push(format!("{name}: exit {:?}", done.code));
        done.assert_no_panic();
        if done.code != Some(0) {
            eprintln!("step {name} failed:\n{}", done.describe());
            self.failed = true;
        }
    }
}

/// The parameters' values: those given, else the defaults (booleans as `true` / `false`).
fn bind(parameters: &Yaml, args: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    for (name, parameter) in parameters.as_hash().into_iter().flatten() {
        let name = name.as_str().unwrap().to_owned();
        let given = args
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string());
        let value = given.or_else(|| match &parameter["default"] {
            Yaml::BadValue => None,
            default => Some(scalar(default, &BTreeMap::new())),
        });
        let value = value.unwrap_or_else(|| panic!("the required parameter {name}"));
        values.insert(name, value);
    }
    for (name, _) in args {
        assert!(values.contains_key(*name), "no parameter {name}");
    }
    values
}

/// A scalar as text, its `<< parameters.NAME >>` filled in.
fn scalar(yaml: &Yaml, values: &BTreeMap<String, String>) -> String {
    match yaml {
        Yaml::String(text) => fill(text, values),
        Yaml::Boolean(b) => b.to_string(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Real(r) => r.clone(),
        other => panic!("not a scalar: {other:?}"),
    }
}

fn fill(text: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = text.to_owned();
    for reference in references(text) {
        let name = reference.strip_prefix("parameters.").unwrap();
        let value = values
            .get(name)
            .unwrap_or_else(|| panic!("<< parameters.{name} >> is not bound"));
        for spelling in [
            format!("<< parameters.{name} >>"),
            format!("<<parameters.{name}>>"),
        ] {
            out = out.replace(&spelling, value);
        }
    }
    out
}

/// A `when` step's condition: a boolean (or a parameter holding one), or `equal: [A, B]`.
fn condition(yaml: &Yaml, values: &BTreeMap<String, String>) -> bool {
    if let Some(pair) = yaml["equal"].as_vec() {
        let texts: Vec<String> = pair.iter().map(|item| scalar(item, values)).collect();
        return texts.windows(2).all(|w| w[0] == w[1]);
    }
    match scalar(yaml, values).as_str() {
        "true" => true,
        "false" => false,
        other => panic!("a condition: {other}"),
    }
}

#[test]
fn the_packed_orb_runs_as_circleci_runs_it() {
    common::with_fresh_sqlite(|ctx| {
        let repo = Repo::new(ctx);
        let key = ctx.key("deploy/production");
        let broken_sha = repo.commit(BASE_UNIX, "broken");
        let fixed_sha = repo.commit(BASE_UNIX + 60, "fixed");

        // Workflow 1: the wait-in-queue job, then a deploy job that fails and ends with
        // exit-queue on_fail; the exit-queue job never runs.
        let broken = Workflow::new(ctx, &repo, &key, &broken_sha, "broken");
        let mut wait_job = MiniCircle::new(&broken);
        wait_job.job("wait-in-queue", &[]);
        assert!(!wait_job.failed, "{:?}", wait_job.ran);
        assert!(holds(ctx, &broken));
        assert_eq!(
            keeper_file(&broken),
            None,
            "the job's turn spans jobs: no keeper"
        );
        let mut deploy_job = MiniCircle::new(&broken);
        deploy_job.failing_step();
        deploy_job.command("exit-queue", &[("exit_condition", "on_fail")]);
        assert_eq!(
            deploy_job.ran,
            [
                "a failing step",
                "Install baton: exit Some(0)",
                "Exit the queue (on_fail): exit Some(0)"
            ]
        );
        assert_eq!(outcomes(ctx, &key), ["failed"]);

        // Workflow 2: a build job shares a value; the deploy job's commands (wait-in-queue as a
        // step, kv-get into a variable, exit-queue always after a failed step).
        let fixed = Workflow::new(ctx, &repo, &key, &fixed_sha, "fixed");
        let name = ctx.key("app/image");
        let image = "registry.example.com/app:\"v2\" it's";
        let mut build_job = MiniCircle::new(&fixed);
        build_job.command("kv-set", &[("name", &name), ("value", image)]);
        assert!(!build_job.failed, "{:?}", build_job.ran);
        let mut deploy_job = MiniCircle::new(&fixed);
        deploy_job.command("wait-in-queue", &[("key", &key), ("ttl", "10m")]);
        deploy_job.command("kv-get", &[("name", &name), ("env_var", "APP_IMAGE")]);
        assert!(!deploy_job.failed, "{:?}", deploy_job.ran);
        assert!(holds(ctx, &fixed));
        let keeper = keeper_of(&fixed);
        let sourced = ctx
            .sh("source", ". \"$BASH_ENV\"; printf '%s' \"$APP_IMAGE\"")
            .env("BASH_ENV", &fixed.bash_env)
            .run();
        assert_eq!(sourced.stdout, image);
        deploy_job.failing_step();
        deploy_job.command("exit-queue", &[("exit_condition", "always")]);
        assert!(
            deploy_job
                .ran
                .iter()
                .any(|step| step.starts_with("Note that the job failed")),
            "{:?}",
            deploy_job.ran
        );
        assert_eq!(outcomes(ctx, &key), ["failed", "failed"]);
        assert!(
            !common::pid_alive(keeper),
            "the keeper ended with exit-queue"
        );

        // Workflow 3: the whole deploy workflow succeeds: wait-in-queue job, exit-queue job.
        let good = Workflow::new(ctx, &repo, &key, &fixed_sha, "good");
        let mut first = MiniCircle::new(&good);
        first.job("wait-in-queue", &[("squash", "false")]);
        let mut last = MiniCircle::new(&good);
        last.job("exit-queue", &[]);
        assert!(
            !first.failed && !last.failed,
            "{:?} {:?}",
            first.ran,
            last.ran
        );
        assert_eq!(outcomes(ctx, &key), ["succeeded", "failed", "failed"]);
    });
}
