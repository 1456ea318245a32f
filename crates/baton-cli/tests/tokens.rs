//! Tokens and outputs: `acquire` in one process and `release` in another, refusals of wrong and
//! stale tokens, what `baton run` hands its command, and exit-code passthrough; the server's
//! tokens file edited by `baton tokens new|ls|revoke`, and read again by `baton serve` on
//! SIGHUP.

use baton_testkit as common;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use common::http::get;
use common::{
    as_u64_lenient, for_each_store, send_signal, wait_until, with_fresh_sqlite, Ctx, PROMPT,
};

/// `baton acquire KEY --timeout 0 [extra]`: exit 0, the token alone on stdout.
fn acquire(ctx: &Ctx, key: &str, extra: &[&str]) -> String {
    let mut args = vec!["acquire", key, "--timeout", "0"];
    args.extend_from_slice(extra);
    let done = ctx.baton(args).run();
    done.assert_code(0);
    let token = done.stdout.trim().to_owned();
    assert!(
        !token.is_empty()
            && !token.contains(char::is_whitespace)
            && done.stdout.trim_end_matches('\n') == token,
        "acquire prints the token alone on stdout:\n{}",
        done.describe()
    );
    token
}

/// A token of the same shape as `token` that is not it.
fn altered(token: &str) -> String {
    let mut chars: Vec<char> = token.chars().collect();
    let last = chars.last_mut().expect("a non-empty token");
    *last = if *last == 'a' { 'b' } else { 'a' };
    chars.into_iter().collect()
}

/// The `NAME=VALUE` lines of an `env` dump.
fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

#[test]
fn acquire_in_one_process_and_release_in_another() {
    for_each_store(|ctx| {
        let key = ctx.key("handoff");
        let github_output = ctx.path("github_output");
        std::fs::write(&github_output, "earlier=line\n").expect("write GITHUB_OUTPUT");
        let done = ctx
            .baton(["acquire", &key, "--json", "--context", "job 1"])
            .env("GITHUB_OUTPUT", &github_output)
            .run();
        done.assert_code(0);
        let json: Value = serde_json::from_str(&done.stdout).unwrap_or_else(|error| {
            panic!(
                "acquire --json prints one JSON object ({error}):\n{}",
                done.describe()
            )
        });
        let field = |name: &str| {
            json.get(name)
                .unwrap_or_else(|| panic!("acquire --json has no `{name}`: {json}"))
        };
        assert_eq!(field("key").as_str(), Some(key.as_str()));
        let id = field("id").as_str().expect("id is a string").to_owned();
        let token = field("token")
            .as_str()
            .expect("token is a string")
            .to_owned();
        let fence = as_u64_lenient(field("fence")).expect("fence is a u64");
        assert!(!id.is_empty() && !token.is_empty() && id != token, "{json}");
        assert!(fence > 0, "{json}");
        for name in ["acquired_at", "lease_until"] {
            assert!(!field(name).is_null(), "`{name}` is set: {json}");
        }
        // Granted at the first look: it waited behind nobody.
        assert_eq!(field("position_at_start").as_u64(), Some(0), "{json}");
        assert!(field("waited_ms").as_u64().is_some(), "{json}");

        let lines: Vec<String> = std::fs::read_to_string(&github_output)
            .expect("read GITHUB_OUTPUT")
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(
            lines.first().map(String::as_str),
            Some("earlier=line"),
            "appended: {lines:?}"
        );
        let outputs = parse_env(&lines.join("\n"));
        assert_eq!(outputs.get("key"), Some(&key), "{lines:?}");
        assert_eq!(outputs.get("ticket"), Some(&token), "{lines:?}");
        assert_eq!(outputs.get("fence"), Some(&fence.to_string()), "{lines:?}");
        assert!(
            outputs
                .get("acquired-at")
                .is_some_and(|value| !value.is_empty()),
            "{lines:?}"
        );
        assert_eq!(
            outputs.get("position-at-start").map(String::as_str),
            Some("0")
        );
        assert!(
            outputs
                .get("waited-seconds")
                .is_some_and(|value| value.parse::<f64>().is_ok()),
            "{lines:?}"
        );

        // Status shows the holder by id and context, with the default 15 min lease, and never
        // the token.
        let status = ctx.status();
        assert!(
            !status.to_string().contains(&token),
            "status reveals the token: {status}"
        );
        let view = ctx.key_view(&key);
        let holders = view.holders();
        assert_eq!(holders.len(), 1, "{}", view.raw);
        assert_eq!(holders[0].id, id, "{}", view.raw);
        assert_eq!(holders[0].context, "job 1", "{}", view.raw);
        // lease_left_ms counts to the deadline plus the clock's uncertainty (when the store's
        // clock, as read, ends the lease), and this reading may lag the writer's by as much.
        let uncertain_ms = ctx.clock_uncertain_ms();
        match holders[0].lease_left_ms() {
            Some(left_ms) => assert!(
                (13 * 60_000..=15 * 60_000 + 2 * uncertain_ms).contains(&left_ms),
                "acquire's default TTL is 15m: {}",
                view.raw
            ),
            // A store without a clock judges leases by observation: no lease left to show.
            None => assert!(
                !ctx.store_has_clock(),
                "holders show lease_left_ms: {}",
                view.raw
            ),
        }
        ctx.baton(["acquire", &key, "--timeout", "0"])
            .run()
            .assert_code(75);

        // Renew from a third process.
        ctx.baton(["renew", &key, &token, "--ttl", "1h"])
            .run()
            .assert_code(0);
        // Only a store with a clock can say how much of a lease is left.
        if let Some(left_ms) = ctx.key_view(&key).holders()[0].lease_left_ms() {
            assert!(
                left_ms > 50 * 60_000,
                "renew --ttl 1h extends the lease: {left_ms} ms"
            );
        } else {
            assert!(!ctx.store_has_clock(), "holders show lease_left_ms");
        }

        // Release from a fourth.
        ctx.baton(["release", &key, &token, "--outcome", "failed"])
            .run()
            .assert_code(0);
        let view = ctx.key_view(&key);
        assert!(view.holders().is_empty(), "{}", view.raw);
        assert_eq!(
            view.last_outcome().as_deref(),
            Some("failed"),
            "{}",
            view.raw
        );

        // Compound durations; status filters by prefix.
        let token2 = acquire(ctx, &key, &["--ttl", "1h30m"]);
        if let Some(left_ms) = ctx.key_view(&key).holders()[0].lease_left_ms() {
            assert!(
                (85 * 60_000..=90 * 60_000 + 2 * uncertain_ms).contains(&left_ms),
                "--ttl 1h30m: {left_ms} ms left"
            );
        } else {
            assert!(!ctx.store_has_clock(), "holders show lease_left_ms");
        }
        let outside = format!("z{}", key);
        let outside_token = acquire(ctx, &outside, &[]);
        assert!(
            ctx.key_status(&outside).is_none(),
            "status PREFIX lists only keys under PREFIX"
        );
        ctx.baton(["release", &outside, &outside_token])
            .run()
            .assert_code(0);
        assert_ne!(token2, token);
        let fence2 = ctx.key_view(&key).fence().expect("status shows the fence");
        assert!(
            fence2 > fence,
            "the next grant's fence is larger: {fence} then {fence2}"
        );
        ctx.baton(["release", &key, &token2, "--outcome", "cancelled"])
            .run()
            .assert_code(0);
        let view = ctx.key_view(&key);
        assert_eq!(
            view.last_outcome().as_deref(),
            Some("cancelled"),
            "{}",
            view.raw
        );
    });
}

#[test]
fn acquire_says_where_its_wait_began_and_how_long_it_lasted() {
    for_each_store(|ctx| {
        let key = ctx.key("line");
        let first = acquire(ctx, &key, &[]);
        let mut waiters = Vec::new();
        for (place, context) in [(1, "second"), (2, "third")] {
            let waiter = ctx
                .baton(["acquire", &key, "--json", "--context", context])
                .name(context)
                .spawn();
            let view = ctx.wait_queued(&key, context);
            assert_eq!(view.queue().len(), place, "{}", view.raw);
            waiters.push(waiter);
        }
        let mut token = first;
        for (place, waiter) in waiters.iter_mut().enumerate() {
            ctx.baton(["release", &key, &token]).run().assert_code(0);
            let done = waiter.wait(PROMPT);
            done.assert_code(0);
            let json: Value = serde_json::from_str(&done.stdout).expect("one JSON object");
            assert_eq!(
                json["position_at_start"].as_u64(),
                Some(place as u64 + 1),
                "1 + the tickets queued ahead when it began: {json}"
            );
            // It waited at least from being seen queued to the release that came after.
            assert!(
                json["waited_ms"].as_u64().is_some_and(|ms| ms > 0),
                "{json}"
            );
            token = json["token"].as_str().expect("a token").to_owned();
        }
        ctx.baton(["release", &key, &token]).run().assert_code(0);
    });
}

#[test]
fn wrong_and_stale_tokens_are_refused() {
    for_each_store(|ctx| {
        let key = ctx.key("tokens");
        let token = acquire(ctx, &key, &["--context", "owner"]);
        let wrong = altered(&token);

        ctx.baton(["release", &key, &wrong])
            .run()
            .assert_refused(&[1]);
        ctx.baton(["renew", &key, &wrong])
            .run()
            .assert_refused(&[1]);
        // A token of another key does not hold this one.
        let other_key = ctx.key("tokens-other");
        let other_token = acquire(ctx, &other_key, &[]);
        ctx.baton(["release", &key, &other_token])
            .run()
            .assert_refused(&[1]);
        ctx.baton(["release", &other_key, &other_token])
            .run()
            .assert_code(0);
        // The refusals changed nothing.
        assert_eq!(ctx.key_view(&key).holder_contexts(), ["owner"]);

        ctx.baton(["release", &key, &token]).run().assert_code(0);
        ctx.baton(["release", &key, &token])
            .run()
            .assert_refused(&[1]);
        ctx.baton(["renew", &key, &token])
            .run()
            .assert_refused(&[1]);

        // An expired lease: taken over by another acquire, then refused to its old owner. Long
        // enough that a store slow to answer (moto on a busy machine took over 1 s) cannot let
        // it run out before the grant reaches its caller (exit 78).
        let expired = acquire(ctx, &key, &["--ttl", "3s", "--context", "short"]);
        std::thread::sleep(Duration::from_millis(4500));
        let done = ctx
            .baton([
                "acquire",
                &key,
                "--timeout",
                "10s",
                "--poll",
                "100ms",
                "--context",
                "next",
            ])
            .run();
        done.assert_code(0);
        let next = done.stdout.trim().to_owned();
        ctx.baton(["renew", &key, &expired])
            .run()
            .assert_refused(&[1]);
        ctx.baton(["release", &key, &expired])
            .run()
            .assert_refused(&[1]);
        assert_eq!(ctx.key_view(&key).holder_contexts(), ["next"]);
        ctx.baton(["release", &key, &next]).run().assert_code(0);
    });
}

#[test]
fn run_hands_its_command_the_key_token_and_fence() {
    for_each_store(|ctx| {
        let key = ctx.key("env/one");
        ctx.baton([
            "run",
            &key,
            "--",
            "sh",
            "-c",
            r#"env > "$TEST_DIR/env1"; "$TEST_BATON" renew "$BATON_KEY" "$BATON_TICKET"; echo $? > "$TEST_DIR/renew_rc""#,
        ])
        .run()
        .assert_code(0);
        let env = parse_env(&ctx.read("env1"));
        assert_eq!(env.get("BATON_KEY"), Some(&key), "{env:?}");
        assert!(
            env.get("BATON_TICKET").is_some_and(|t| !t.is_empty()),
            "{env:?}"
        );
        let fence: u64 = env["BATON_FENCE"]
            .parse()
            .expect("BATON_FENCE is a decimal u64");
        assert_eq!(
            ctx.read("renew_rc").trim(),
            "0",
            "BATON_TICKET is the live token"
        );
        assert_eq!(
            ctx.key_view(&key).fence(),
            Some(fence),
            "the fence status shows"
        );

        // Several keys: numbered variables in sorted key order; the plain ones are the first.
        let key_a = ctx.key("env/a");
        let key_b = ctx.key("env/b");
        let key_c = ctx.key("env/c");
        ctx.baton([
            "run",
            &key_c,
            &key_a,
            &key_b,
            "--",
            "sh",
            "-c",
            r#"env > "$TEST_DIR/env3""#,
        ])
        .run()
        .assert_code(0);
        let env = parse_env(&ctx.read("env3"));
        assert_eq!(
            env.get("BATON_KEYS").map(String::as_str),
            Some("3"),
            "{env:?}"
        );
        for (index, key) in [&key_a, &key_b, &key_c].into_iter().enumerate() {
            let n = index + 1;
            assert_eq!(env.get(&format!("BATON_KEY_{n}")), Some(key), "{env:?}");
            let fence: u64 = env[&format!("BATON_FENCE_{n}")]
                .parse()
                .expect("a decimal fence");
            assert_eq!(ctx.key_view(key).fence(), Some(fence), "BATON_FENCE_{n}");
        }
        assert_eq!(env.get("BATON_KEY"), Some(&key_a));
        assert_eq!(env.get("BATON_TICKET"), env.get("BATON_TICKET_1"));
        assert_eq!(env.get("BATON_FENCE"), env.get("BATON_FENCE_1"));
        let tickets: std::collections::BTreeSet<&String> = (1..=3)
            .map(|n| &env[&format!("BATON_TICKET_{n}")])
            .collect();
        assert_eq!(tickets.len(), 3, "one token per key: {env:?}");
    });
}

#[test]
fn run_passes_exit_codes_through_and_records_the_outcome() {
    for_each_store(|ctx| {
        let key = ctx.key("exit");
        let cases: [(&[&str], i32, &str); 4] = [
            (&["sh", "-c", "exit 7"], 7, "failed"),
            (&["true"], 0, "succeeded"),
            (&["sh", "-c", "kill -KILL $$"], 128 + 9, "failed"),
            (&["false"], 1, "failed"),
        ];
        for (command, code, outcome) in cases {
            let mut args = vec!["run", key.as_str(), "--"];
            args.extend_from_slice(command);
            ctx.baton(args).run().assert_code(code);
            let view = ctx.key_view(&key);
            assert_eq!(
                view.last_outcome().as_deref(),
                Some(outcome),
                "after {command:?}: {}",
                view.raw
            );
            assert!(view.holders().is_empty(), "{}", view.raw);
        }

        // baton's own output goes to stderr; stdout is the command's alone.
        let done = ctx
            .baton(["run", &key, "--", "sh", "-c", "echo out; echo err >&2"])
            .run();
        done.assert_code(0);
        assert_eq!(done.stdout, "out\n", "{}", done.describe());
        assert!(done.stderr.contains("err"), "{}", done.describe());

        // A command that cannot start fails the run and does not leave the key held.
        let done = ctx
            .baton(["run", &key, "--", "/nonexistent/baton-test-command"])
            .run();
        done.assert_no_panic();
        assert_ne!(done.code, Some(0), "{}", done.describe());
        assert!(!done.stderr.trim().is_empty(), "{}", done.describe());
        let view = ctx.key_view(&key);
        assert!(view.holders().is_empty(), "{}", view.raw);
        let token = acquire(ctx, &key, &[]);
        ctx.baton(["release", &key, &token]).run().assert_code(0);
    });
}

/// `--store` wins over `BATON_STORE`; a relative `sqlite:PATH` is taken from the current
/// directory; status names the store it reads.
#[test]
fn store_flag_and_relative_sqlite_paths() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("where");
        let elsewhere = format!("sqlite:{}/elsewhere.db", ctx.dir().display());
        let token = ctx
            .baton(["acquire", &key, "--timeout", "0", "--store", &ctx.store])
            .env("BATON_STORE", &elsewhere)
            .run()
            .assert_code(0)
            .stdout
            .trim()
            .to_owned();
        assert_eq!(
            ctx.key_view(&key).holders().len(),
            1,
            "--store chose the store"
        );
        ctx.baton(["release", &key, &token]).run().assert_code(0);

        std::fs::create_dir(ctx.path("cwd")).expect("mkdir cwd");
        let token = ctx
            .baton(["acquire", &key, "--timeout", "0"])
            .env("BATON_STORE", "sqlite:relative.db")
            .current_dir(&ctx.path("cwd"))
            .run()
            .assert_code(0)
            .stdout
            .trim()
            .to_owned();
        assert!(
            ctx.exists("cwd/relative.db"),
            "sqlite:relative.db is under the current directory"
        );
        let status = ctx
            .baton(["status", &ctx.prefix, "--json"])
            .env("BATON_STORE", "sqlite:relative.db")
            .current_dir(&ctx.path("cwd"))
            .run();
        status.assert_code(0);
        let json: Value = serde_json::from_str(&status.stdout).expect("status --json is JSON");
        let store = json
            .get("store")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(
            store.contains("relative.db"),
            "status names its store: {json}"
        );
        ctx.baton(["release", &key, &token])
            .env("BATON_STORE", "sqlite:relative.db")
            .current_dir(&ctx.path("cwd"))
            .run()
            .assert_code(0);
    });
}

/// `baton tokens new NAME --scope … --file FILE`: the token alone on stdout.
fn new_server_token(ctx: &Ctx, file: &str, name: &str, scopes: &[&str]) -> String {
    let mut args = vec!["tokens", "new", name, "--file", file];
    for scope in scopes {
        args.extend_from_slice(&["--scope", scope]);
    }
    let done = ctx.baton(&args).run();
    done.assert_code(0);
    let token = done.stdout.trim().to_owned();
    assert!(
        token.starts_with("bt_") && done.stdout == format!("{token}\n"),
        "the token alone on stdout:\n{}",
        done.describe()
    );
    token
}

/// The names `baton tokens ls --json` lists, with their scopes.
fn listed(ctx: &Ctx, file: &str) -> Vec<(String, Vec<String>)> {
    let done = ctx.baton(["tokens", "ls", "--file", file, "--json"]).run();
    done.assert_code(0);
    let json: Value = serde_json::from_str(&done.stdout).expect("tokens ls --json is JSON");
    json["tokens"]
        .as_array()
        .expect("a list of tokens")
        .iter()
        .map(|t| {
            let scopes = t["scopes"].as_array().expect("scopes");
            let scopes = scopes.iter().map(|s| s.as_str().expect("text").to_owned());
            (
                t["name"].as_str().expect("name").to_owned(),
                scopes.collect(),
            )
        })
        .collect()
}

#[test]
fn tokens_new_ls_and_revoke_edit_the_tokens_file() {
    with_fresh_sqlite(|ctx| {
        use std::os::unix::fs::PermissionsExt;
        let path = ctx.path("conf/tokens.json");
        std::fs::create_dir(ctx.path("conf")).expect("mkdir");
        let file = path.to_str().expect("a path");
        let ci = new_server_token(ctx, file, "ci", &["lock:deploy/", "read:"]);
        let mode = std::fs::metadata(&path)
            .expect("the file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the file is private: {mode:o}");
        let ops = new_server_token(ctx, file, "ops", &["admin:"]);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            !text.contains(&ci) && !text.contains(&ops),
            "the file keeps hashes, never tokens:\n{text}"
        );
        let both = vec![
            (
                "ci".to_owned(),
                vec!["lock:deploy/".to_owned(), "read:".to_owned()],
            ),
            ("ops".to_owned(), vec!["admin:".to_owned()]),
        ];
        assert_eq!(listed(ctx, file), both, "an added token keeps the others");
        let plain = ctx.baton(["tokens", "ls", "--file", file]).run();
        plain.assert_code(0);
        assert_eq!(plain.stdout, "ci   lock:deploy/ read:\nops  admin:\n");
        assert!(!plain.stdout.contains("sha256") && !text.is_empty());

        // A name taken is refused, and the file is left as it was.
        let again = ctx
            .baton(["tokens", "new", "ci", "--scope", "read:", "--file", file])
            .run();
        again.assert_code(1);
        assert!(
            again.stdout.is_empty() && again.stderr.contains("already has a token named \"ci\""),
            "{}",
            again.describe()
        );
        assert_eq!(std::fs::read_to_string(&path).expect("read"), text);

        // BATON_TOKENS_FILE is the default file, as for `baton serve --tokens`.
        let revoked = ctx
            .baton(["tokens", "revoke", "ci"])
            .env("BATON_TOKENS_FILE", file)
            .run();
        revoked.assert_code(0);
        assert!(revoked.stderr.contains("SIGHUP"), "{}", revoked.describe());
        assert_eq!(listed(ctx, file), both[1..], "revoke keeps the others");
        let unknown = ctx.baton(["tokens", "revoke", "ci", "--file", file]).run();
        unknown.assert_code(3);
        assert!(
            unknown
                .stderr
                .contains("no token named \"ci\"; it has: ops"),
            "{}",
            unknown.describe()
        );
        let left: Vec<String> = std::fs::read_dir(ctx.path("conf"))
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["tokens.json"], "no temporary file is left behind");

        // ls and revoke need a file; ls of a file not made yet says how to make it.
        let without = ctx.baton(["tokens", "ls"]).run();
        without.assert_code(2);
        let missing = ctx.path("none.json");
        let missing = missing.to_str().expect("a path");
        let none = ctx.baton(["tokens", "ls", "--file", missing]).run();
        none.assert_code(1);
        assert!(
            none.stderr.contains("baton tokens new"),
            "{}",
            none.describe()
        );
    });
}

#[test]
fn a_running_server_takes_added_and_revoked_tokens_on_sighup() {
    with_fresh_sqlite(|ctx| {
        let path = ctx.path("tokens.json");
        let file = path.to_str().expect("a path");
        let first = new_server_token(ctx, file, "first", &["read:"]);
        let (mut server, address) = ctx.serve(&["--tokens", file]);
        let whoami = |token: &str| get(address, "/v1/whoami", Some(token)).status;
        assert_eq!(whoami(&first), 200);
        let later = new_server_token(ctx, file, "later", &["read:"]);
        assert_eq!(whoami(&later), 401, "not known before SIGHUP");

        let reloads = |server: &common::Proc| server.stderr().matches("SIGHUP:").count();
        send_signal(server.pid(), libc::SIGHUP);
        wait_until("the reload's line", PROMPT, || reloads(&server) == 1);
        assert!(
            server
                .stderr()
                .contains(&format!("read {file} again: 2 tokens")),
            "{}",
            server.stderr()
        );
        assert_eq!(whoami(&later), 200, "known after SIGHUP");

        ctx.baton(["tokens", "revoke", "first", "--file", file])
            .run()
            .assert_code(0);
        send_signal(server.pid(), libc::SIGHUP);
        wait_until("the second reload's line", PROMPT, || reloads(&server) == 2);
        assert_eq!(whoami(&first), 401, "revoked");
        assert_eq!(whoami(&later), 200);

        // A file that fails to parse is reported, and the tokens as they were stay.
        std::fs::write(&path, "{ not json").expect("write");
        send_signal(server.pid(), libc::SIGHUP);
        wait_until("the third reload's line", PROMPT, || reloads(&server) == 3);
        assert!(
            server.stderr().contains("kept the tokens as they were"),
            "{}",
            server.stderr()
        );
        assert_eq!(whoami(&later), 200, "the old tokens stay");
        assert!(!server.has_exited(), "SIGHUP never stops the server");
        assert!(
            !server.stderr().contains(&later) && !server.stderr().contains(&first),
            "no token in the server's output"
        );
    });
}

#[test]
fn metrics_need_a_token_unless_public() {
    with_fresh_sqlite(|ctx| {
        let path = ctx.path("tokens.json");
        let file = path.to_str().expect("a path");
        let reader = new_server_token(ctx, file, "reader", &["read:"]);
        let (_server, address) = ctx.serve(&["--tokens", file]);
        assert_eq!(get(address, "/metrics", None).status, 401);
        assert_eq!(get(address, "/metrics", Some(&reader)).status, 200);
        let (_public, address) = ctx.serve(&["--tokens", file, "--metrics-public"]);
        assert_eq!(get(address, "/metrics", None).status, 200);
        assert_eq!(
            get(address, "/v1/whoami", None).status,
            401,
            "only /metrics is public"
        );
    });
}

/// `--token-file FILE` and `BATON_TOKEN_FILE` give the token for a server, read by every
/// command (so a token that expires can be written anew between calls); `--token` wins over
/// them; a missing or empty file is a usage error that names it.
#[test]
fn the_token_for_a_server_may_come_from_a_file() {
    with_fresh_sqlite(|ctx| {
        let path = ctx.path("tokens.json");
        let file = path.to_str().expect("a path");
        let ci = new_server_token(ctx, file, "ci", &["read:"]);
        let (_server, address) = ctx.serve(&["--tokens", file]);
        let store = format!("http://{address}");
        let token_file = ctx.path("ci.token");
        let token_path = token_file.to_str().expect("a path");
        std::fs::write(&token_file, format!("{ci}\n")).expect("write");
        let status = |extra: &[&str], env: Option<&str>| {
            let mut args = vec!["status", "k", "--store", &store];
            args.extend_from_slice(extra);
            let mut cmd = ctx.baton(&args);
            if let Some(env) = env {
                cmd = cmd.env("BATON_TOKEN_FILE", env);
            }
            cmd.run()
        };
        status(&["--token-file", token_path], None).assert_code(0);
        status(&[], Some(token_path)).assert_code(0);
        std::fs::write(&token_file, "bt_revoked\n").expect("write");
        let refused = status(&[], Some(token_path));
        assert_ne!(refused.code, Some(0), "read again: {}", refused.describe());
        status(&["--token", &ci], Some(token_path)).assert_code(0);
        let missing = ctx.path("missing.token");
        let done = status(&["--token-file", missing.to_str().expect("a path")], None);
        done.assert_code(2);
        assert!(
            done.stderr.contains("cannot read the token file"),
            "{}",
            done.describe()
        );
        std::fs::write(&token_file, "\n").expect("write");
        let done = status(&[], Some(token_path));
        done.assert_code(2);
        assert!(
            done.stderr.contains("must hold one token"),
            "{}",
            done.describe()
        );
    });
}
