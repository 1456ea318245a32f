//! `baton reap` and `baton serve --reap`: a turn taken in CI records its run, and once the CI
//! provider says the run has ended the turn is force-released (cancelled, "its CI run ended
//! (CONCLUSION)") and the next in line gets the key. Runs still going, and runs that cannot be
//! judged (no token, a refused token, a rate limit), keep their turns. The providers are a fake
//! API on 127.0.0.1 that answers as GitHub's, CircleCI's and GitLab's documented endpoints do.

use baton_testkit as common;

use common::fake_ci::{FakeCi, Reply};
use common::{for_each_store, wait_until, with_fresh_sqlite, Cmd, Ctx, PROMPT};
use serde_json::Value;

const CIRCLE_ENDED: &str = "0e4f6a8b-1c2d-4e5f-8a9b-0c1d2e3f4a5b";
const CIRCLE_ON_HOLD: &str = "7b1c2d3e-4f5a-4b6c-9d7e-8f9a0b1c2d3e";

/// The variables a GitHub Actions job of run `run_id` (attempt 1) of `octo/app` has.
fn github_env(run_id: u64) -> Vec<(String, String)> {
    vec![
        ("GITHUB_ACTIONS".into(), "true".into()),
        ("GITHUB_REPOSITORY".into(), "octo/app".into()),
        ("GITHUB_RUN_ID".into(), run_id.to_string()),
        ("GITHUB_RUN_ATTEMPT".into(), "1".into()),
    ]
}

fn circleci_env(workflow: &str) -> Vec<(String, String)> {
    vec![
        ("CIRCLECI".into(), "true".into()),
        ("CIRCLE_WORKFLOW_ID".into(), workflow.into()),
    ]
}

fn gitlab_env(pipeline: u64) -> Vec<(String, String)> {
    vec![
        ("GITLAB_CI".into(), "true".into()),
        ("CI_PROJECT_ID".into(), "4242".into()),
        ("CI_PIPELINE_ID".into(), pipeline.to_string()),
    ]
}

fn with_env<'c>(mut cmd: Cmd<'c>, env: &[(String, String)]) -> Cmd<'c> {
    for (name, value) in env {
        cmd = cmd.env(name, value);
    }
    cmd
}

/// Takes `key` in the CI job that `env` describes, with a long lease (only a reap frees it).
fn take_in_ci(ctx: &Ctx, key: &str, env: &[(String, String)]) {
    let acquire = ctx.baton(["acquire", key, "--ttl", "10m", "-q", "--context", key]);
    with_env(acquire, env).run().assert_code(0);
}

/// One `baton reap` pass over `prefix` with the fake's variables and `extra` ones.
fn reap(ctx: &Ctx, fake: &FakeCi, prefix: &str, extra: &[&str]) -> common::Done {
    let mut args = vec!["reap", prefix];
    args.extend_from_slice(extra);
    with_env(ctx.baton(&args), &fake.env()).run()
}

fn held(ctx: &Ctx, key: &str) -> bool {
    ctx.key_status(key)
        .is_some_and(|view| !view.holders().is_empty())
}

/// The newest ended turn of `key`'s history.
fn last_end(ctx: &Ctx, key: &str) -> Value {
    let history = ctx.history(key);
    history
        .into_iter()
        .find(|entry| entry["outcome"].is_string())
        .unwrap_or(Value::Null)
}

fn assert_reaped(ctx: &Ctx, key: &str, conclusion: &str) {
    let end = last_end(ctx, key);
    assert_eq!(end["outcome"], "cancelled", "{end}");
    assert_eq!(end["forced"], true, "{end}");
    let reason = format!("its CI run ended ({conclusion})");
    assert_eq!(end["reason"], reason.as_str(), "{end}");
}

#[test]
fn a_turn_whose_github_run_ended_is_freed_and_the_next_in_line_gets_the_key() {
    for_each_store(|ctx| {
        let fake = FakeCi::start();
        fake.github_run("octo/app", 101, 1, "completed", Some("cancelled"));
        fake.github_run("octo/app", 102, 1, "in_progress", None);
        let (ended, going) = (ctx.key("ci/ended"), ctx.key("ci/going"));
        take_in_ci(ctx, &ended, &github_env(101));
        take_in_ci(ctx, &going, &github_env(102));
        let holder = ctx.key_view(&going).holders();
        let run = &holder[0].raw["ci_run"];
        assert_eq!(run["provider"], "github", "status shows the run: {run}");
        assert_eq!(run["run_id"], 102, "{run}");
        let mut next = ctx
            .baton([
                "acquire",
                &ended,
                "--timeout",
                "2m",
                "-q",
                "--context",
                "next",
            ])
            .spawn();
        ctx.wait_queued(&ended, "next");

        let prefix = ctx.key("ci/");
        let done = reap(ctx, &fake, &prefix, &[]);
        done.assert_code(0);
        assert!(
            done.stdout.contains(&format!("freed {ended}")),
            "{}",
            done.describe()
        );
        assert!(!done.stdout.contains(&going), "{}", done.describe());

        next.wait(PROMPT).assert_code(0);
        assert_reaped(ctx, &ended, "cancelled");
        assert!(held(ctx, &going), "a run in progress keeps its turn");
        for seen in fake.seen() {
            assert_eq!(
                seen.headers.get("x-github-api-version").map(String::as_str),
                Some("2022-11-28"),
                "{seen:?}"
            );
        }
    });
}

#[test]
fn circleci_and_gitlab_runs_are_freed_on_their_final_statuses_only() {
    with_fresh_sqlite(|ctx| {
        let fake = FakeCi::start();
        fake.circleci_workflow(CIRCLE_ENDED, "canceled");
        fake.circleci_workflow(CIRCLE_ON_HOLD, "on_hold");
        fake.gitlab_pipeline(4242, 55, "failed");
        fake.gitlab_pipeline(4242, 56, "manual");
        take_in_ci(
            ctx,
            &ctx.key("ci/circle-ended"),
            &circleci_env(CIRCLE_ENDED),
        );
        take_in_ci(
            ctx,
            &ctx.key("ci/circle-on-hold"),
            &circleci_env(CIRCLE_ON_HOLD),
        );
        take_in_ci(ctx, &ctx.key("ci/gitlab-ended"), &gitlab_env(55));
        take_in_ci(ctx, &ctx.key("ci/gitlab-manual"), &gitlab_env(56));

        let done = reap(ctx, &fake, &ctx.key("ci/"), &["--json"]);
        done.assert_code(0);
        let pass: Value = serde_json::from_str(done.stdout.trim()).expect("one JSON object");
        let keys = |list: &str| -> Vec<String> {
            let mut keys: Vec<String> = pass[list]
                .as_array()
                .unwrap_or_else(|| panic!("{list} in {pass}"))
                .iter()
                .map(|turn| turn["key"].as_str().unwrap_or_default().to_owned())
                .collect();
            keys.sort();
            keys
        };
        let k = |name: &str| ctx.key(name);
        let (freed, going) = (keys("freed"), keys("going"));
        assert_eq!(
            freed,
            [k("ci/circle-ended"), k("ci/gitlab-ended")],
            "{pass}"
        );
        assert_eq!(
            going,
            [k("ci/circle-on-hold"), k("ci/gitlab-manual")],
            "{pass}"
        );
        assert_reaped(ctx, &ctx.key("ci/circle-ended"), "canceled");
        assert_reaped(ctx, &ctx.key("ci/gitlab-ended"), "failed");
        assert!(
            held(ctx, &ctx.key("ci/circle-on-hold")) && held(ctx, &ctx.key("ci/gitlab-manual"))
        );
    });
}

#[test]
fn turns_that_cannot_be_judged_are_left_alone_and_named() {
    with_fresh_sqlite(|ctx| {
        let fake = FakeCi::start();
        fake.github_run("octo/app", 201, 1, "completed", Some("failure"));
        take_in_ci(ctx, &ctx.key("ci/a"), &github_env(201));

        // No token: nobody is asked.
        let done = ctx.baton(["reap"]).run();
        done.assert_code(1);
        assert!(
            done.stderr.contains("BATON_GITHUB_TOKEN is not set"),
            "{}",
            done.describe()
        );
        assert!(
            done.stderr.contains(&format!("left {}", ctx.key("ci/a"))),
            "{}",
            done.describe()
        );
        // A token the provider refuses.
        let mut env = fake.env();
        env.push(("BATON_GITHUB_TOKEN".into(), "wrong".into()));
        let done = with_env(ctx.baton(["reap"]), &env).run();
        done.assert_code(1);
        assert!(
            done.stderr
                .contains("refused BATON_GITHUB_TOKEN (HTTP 401)"),
            "{}",
            done.describe()
        );
        assert!(held(ctx, &ctx.key("ci/a")));

        // Rate-limited: the provider is not asked again in the pass.
        let reset = (std::time::SystemTime::now() + std::time::Duration::from_secs(3_600))
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let limited = Reply {
            status: 403,
            headers: vec![
                ("x-ratelimit-remaining".into(), "0".into()),
                ("x-ratelimit-reset".into(), reset.to_string()),
            ],
            body: r#"{"message":"API rate limit exceeded"}"#.into(),
        };
        fake.reply("/repos/octo/app/actions/runs/201/attempts/1", limited);
        fake.github_run("octo/app", 202, 1, "completed", Some("cancelled"));
        take_in_ci(ctx, &ctx.key("ci/b"), &github_env(202));
        let asked_before = fake.seen().len();
        let done = reap(ctx, &fake, &ctx.key("ci/"), &[]);
        done.assert_code(1);
        assert!(
            done.stderr.contains("rate-limited the reaper (HTTP 403)"),
            "{}",
            done.describe()
        );
        assert_eq!(
            fake.seen().len(),
            asked_before + 1,
            "asked once, then left alone"
        );
        assert!(held(ctx, &ctx.key("ci/a")) && held(ctx, &ctx.key("ci/b")));

        // GitLab's 429 with Retry-After.
        let retry = Reply {
            status: 429,
            headers: vec![("retry-after".into(), "120".into())],
            body: "{}".into(),
        };
        fake.reply("/api/v4/projects/4242/pipelines/57", retry);
        take_in_ci(ctx, &ctx.key("gl/c"), &gitlab_env(57));
        let done = reap(ctx, &fake, &ctx.key("gl/"), &[]);
        done.assert_code(1);
        assert!(
            done.stderr
                .contains("gitlab rate-limited the reaper (HTTP 429)"),
            "{}",
            done.describe()
        );
        assert!(held(ctx, &ctx.key("gl/c")));
    });
}

#[test]
fn follow_frees_a_turn_once_its_run_ends_and_serve_reap_does_the_same() {
    with_fresh_sqlite(|ctx| {
        let fake = FakeCi::start();
        let asked = |path: &str| fake.seen().iter().filter(|s| s.path == path).count();
        // `reap --follow`, alone: the server below reaps every key, and would race it.
        fake.github_run("octo/app", 301, 1, "in_progress", None);
        let key = ctx.key("ci/follow");
        take_in_ci(ctx, &key, &github_env(301));
        let follow = ctx.baton(["reap", &key, "--follow", "--every", "1s"]);
        let mut follow = with_env(follow, &fake.env()).spawn();
        let run = "/repos/octo/app/actions/runs/301/attempts/1";
        wait_until("two passes asked about the run", PROMPT, || asked(run) >= 2);
        assert!(held(ctx, &key), "a run going keeps its turn");
        fake.github_run("octo/app", 301, 1, "completed", Some("success"));
        wait_until("the turn freed", PROMPT, || !held(ctx, &key));
        assert_reaped(ctx, &key, "success");
        follow.kill();
        let said = follow.stdout();
        assert!(said.contains(&format!("freed {key}")), "{said}");

        // `serve --reap`.
        fake.gitlab_pipeline(4242, 77, "running");
        let key = ctx.key("ci/served");
        take_in_ci(ctx, &key, &gitlab_env(77));
        let (mut server, _address) =
            ctx.serve_with_env(&["--reap", "--reap-every", "1s"], &fake.env());
        let pipeline = "/api/v4/projects/4242/pipelines/77";
        wait_until("two passes asked about the pipeline", PROMPT, || {
            asked(pipeline) >= 2
        });
        assert!(held(ctx, &key), "a pipeline running keeps its turn");
        fake.gitlab_pipeline(4242, 77, "canceled");
        wait_until("the turn freed", PROMPT, || !held(ctx, &key));
        assert_reaped(ctx, &key, "canceled");
        server.kill();
        let said = server.stderr();
        assert!(said.contains(&format!("reap: freed {key}")), "{said}");
    });
}
