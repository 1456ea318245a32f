//! The GitHub Action asks GitHub for the run's ID token when its store is `baton serve` and no
//! `token` is given: the runner's `ACTIONS_ID_TOKEN_REQUEST_URL` and `_TOKEN` point at a fake
//! on 127.0.0.1 (the fake CI API of `baton reap`'s tests, answering as GitHub's token service),
//! and what it answers is the bearer token the server sees. The server here takes it as a
//! tokens-file token: what the server does with a real ID token (`--trust`) is
//! `baton-server`'s `tests/trust.rs`; this test holds the action's half.
//!
//! It needs `node` (`scripts/test.sh` installs Debian's `nodejs`).

use baton_testkit as common;

use std::path::Path;

use common::fake_ci::{FakeCi, Reply, GITHUB_TOKEN};
use common::{baton_bin, with_fresh_sqlite, Ctx, Done, PROMPT};

/// Runs the action's `entry` step (`node dist/ENTRY.js`) as the runner would, with `inputs`
/// as `INPUT_*`, `state` as `STATE_*` and `env`, and `baton` first on `PATH`: what it did and
/// the state it left.
fn step(
    ctx: &Ctx,
    entry: &str,
    inputs: &[(&str, &str)],
    state: &[(String, String)],
    env: &[(String, String)],
) -> (Done, Vec<(String, String)>) {
    let bin_dir = ctx.path("bin");
    if !bin_dir.exists() {
        std::fs::create_dir_all(&bin_dir).expect("create the bin directory");
        std::os::unix::fs::symlink(baton_bin(), bin_dir.join("baton")).expect("link baton");
    }
    let state_file = ctx.path(&format!("{entry}.state"));
    std::fs::write(&state_file, b"").expect("create the state file");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("github/dist/{entry}.js"));
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = ctx
        .program(entry, "node", [&script])
        .env("PATH", path)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_WORKFLOW", "deploy")
        .env("GITHUB_JOB", "ship")
        .env("GITHUB_RUN_NUMBER", "7")
        .env("GITHUB_STATE", &state_file)
        .env("GITHUB_OUTPUT", ctx.path(&format!("{entry}.output")))
        .env("RUNNER_TEMP", ctx.dir())
        .env("XDG_STATE_HOME", ctx.path("state"));
    for (name, value) in inputs {
        cmd = cmd.env(format!("INPUT_{}", name.to_uppercase()), value);
    }
    for (name, value) in state.iter().chain(env) {
        let name = match state.iter().any(|(n, _)| n == name) {
            true => format!("STATE_{name}"),
            false => name.clone(),
        };
        cmd = cmd.env(name, value);
    }
    let done = cmd.spawn().wait(PROMPT);
    let text = std::fs::read_to_string(&state_file).expect("read the state file");
    (done, state_entries(&text))
}

/// The `NAME<<DELIMITER` … `DELIMITER` entries the runner's toolkit writes.
fn state_entries(text: &str) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some((name, delimiter)) = line.split_once("<<") {
            let value: Vec<&str> = lines.by_ref().take_while(|l| *l != delimiter).collect();
            entries.push((name.to_owned(), value.join("\n")));
        } else if let Some((name, value)) = line.split_once('=') {
            entries.push((name.to_owned(), value.to_owned()));
        }
    }
    entries
}

#[test]
fn the_action_asks_github_for_the_runs_id_token_and_bears_it_to_baton_serve() {
    with_fresh_sqlite(|ctx| {
        let tokens = ctx.path("tokens.json");
        let file = tokens.to_str().expect("a path");
        let made = ctx
            .baton(["tokens", "new", "ci", "--scope", "lock:", "--file", file])
            .run();
        made.assert_code(0);
        // What the fake token service answers: the server knows it.
        let id_token = made.stdout.trim().to_owned();
        let (_server, address) = ctx.serve(&["--tokens", file]);
        let store = format!("http://{address}");
        let fake = FakeCi::start();
        let base = fake
            .env()
            .into_iter()
            .find(|(name, _)| name == "BATON_GITHUB_API_URL")
            .map(|(_, url)| url)
            .expect("the fake's URL");
        let asked = "/id-token?api-version=2.0&audience=ci-lock";
        fake.reply(asked, Reply::json(serde_json::json!({ "value": id_token })));
        let runner = vec![
            (
                "ACTIONS_ID_TOKEN_REQUEST_URL".to_owned(),
                format!("{base}/id-token?api-version=2.0"),
            ),
            (
                "ACTIONS_ID_TOKEN_REQUEST_TOKEN".to_owned(),
                GITHUB_TOKEN.to_owned(),
            ),
        ];
        let key = ctx.key("deploy/prod");
        let inputs = [
            ("name", key.as_str()),
            ("store", store.as_str()),
            ("token", ""),
            ("audience", "ci-lock"),
            ("lease", "1m"),
            ("expires", "2m"),
            ("mask-ticket", "true"),
        ];
        let (main, state) = step(ctx, "main", &inputs, &[], &runner);
        main.assert_code(0);
        let seen = fake.seen();
        assert_eq!(seen.len(), 1, "one ID token asked for: {seen:?}");
        assert_eq!(seen[0].path, asked, "with the audience input");
        assert_eq!(
            seen[0].headers.get("authorization").map(String::as_str),
            Some(format!("Bearer {GITHUB_TOKEN}").as_str()),
            "with the runner's request token"
        );
        assert!(
            main.stdout.contains(&format!("::add-mask::{id_token}")),
            "the ID token is masked:\n{}",
            main.describe()
        );
        assert!(
            ctx.key_view(&key).holders().len() == 1,
            "held through the server"
        );
        let (post, _) = step(ctx, "post", &[("outcome", "success")], &state, &runner);
        post.assert_code(0);
        assert!(
            ctx.key_view(&key).holders().is_empty(),
            "released through the server"
        );

        // Without `permissions: id-token: write` the runner sets no request URL: the action
        // goes on without a token, says why, and the server refuses it (it has a tokens file).
        let (main, _) = step(ctx, "main", &inputs, &[], &[]);
        assert_ne!(main.code, Some(0), "{}", main.describe());
        assert!(
            main.stdout.contains("id-token: write"),
            "{}",
            main.describe()
        );
    });
}
