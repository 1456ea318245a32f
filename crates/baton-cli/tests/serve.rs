//! `baton serve`, a real server process on loopback: health and readiness, tokens and scopes
//! (401 and 403 with JSON bodies, tokens never echoed or logged), JSON errors for bad input,
//! the refusal to listen beyond loopback without tokens, and a clean stop on SIGTERM.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::http::{get, request};
use common::{wait_for, with_fresh_sqlite, Ctx, Proc, PROMPT};
use serde_json::Value;

/// A started `baton serve` and the address it listens on.
struct Server {
    proc: Proc,
    address: SocketAddr,
}

/// Starts `baton serve --listen 127.0.0.1:0` with `extra` arguments; waits for its address.
fn serve(ctx: &Ctx, extra: &[&str]) -> Server {
    let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let mut proc = ctx.baton(&args).name("serve").spawn();
    let address = wait_for("the server's address", PROMPT, || {
        if proc.has_exited() {
            panic!("baton serve exited:\n{}", proc.stderr());
        }
        let stderr = proc.stderr();
        let line = stderr.lines().find(|l| l.contains(" on http://"))?;
        let rest = line.split(" on http://").nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    });
    Server { proc, address }
}

/// A key as one path segment.
fn segment(key: &str) -> String {
    key.replace('%', "%25").replace('/', "%2F")
}

fn new_token(ctx: &Ctx, name: &str, scopes: &[&str]) -> (String, Value) {
    let mut args = vec!["tokens", "new", name, "--json"];
    for scope in scopes {
        args.extend_from_slice(&["--scope", scope]);
    }
    let done = ctx.baton(&args).run();
    done.assert_code(0);
    let made: Value = serde_json::from_str(done.stdout.trim()).expect("tokens new --json");
    let token = made["token"].as_str().expect("token").to_owned();
    (token, made["entry"].clone())
}

fn assert_error(answer: &common::http::Answer, status: u16, code: &str) {
    assert_eq!(answer.status, status, "{answer:?}");
    assert_eq!(answer.body["error"]["code"], code, "{answer:?}");
    let message = answer.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        !message.is_empty(),
        "a message that says what to do: {answer:?}"
    );
}

#[test]
fn a_server_without_tokens_answers_health_readiness_and_the_log_on_loopback() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("deploy/prod");
        ctx.baton(["run", &key, "--context", "first deploy", "--", "true"])
            .run()
            .assert_code(0);
        let server = serve(ctx, &[]);
        assert!(server.proc.stderr().contains("no tokens file"));
        let health = get(server.address, "/healthz", None);
        assert_eq!(
            (health.status, &health.body["status"]),
            (200, &Value::from("ok"))
        );
        let ready = get(server.address, "/readyz", None);
        assert_eq!(ready.status, 200, "{ready:?}");
        assert!(ready.body["store"]
            .as_str()
            .unwrap_or_default()
            .contains("sqlite"));
        let me = get(server.address, "/v1/whoami", None);
        assert_eq!(me.body["scopes"][0], "admin:");
        // The log, as `baton log --json` has it, without the notes kept for deliverers.
        let path = format!("/v1/keys/{}/log?n=5", segment(&key));
        let log = get(server.address, &path, None);
        assert_eq!(log.status, 200, "{log:?}");
        let entries = log.body["entries"].as_array().expect("entries");
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["context"], "first deploy");
        assert_eq!(entries[0]["outcome"], "succeeded");
        assert!(entries[0].get("events").is_none());
        // A key nobody used has an empty log.
        let none = get(
            server.address,
            &format!("/v1/keys/{}/log", segment(&ctx.key("x"))),
            None,
        );
        assert_eq!(none.body["entries"], Value::Array(vec![]));
    });
}

#[test]
fn without_tokens_it_refuses_to_listen_beyond_loopback() {
    with_fresh_sqlite(|ctx| {
        // Refused before binding: nothing listens on another address.
        let done = ctx.baton(["serve", "--listen", "0.0.0.0:0"]).run();
        done.assert_refused(&[2]);
        assert!(done.stderr.contains("--tokens"), "{}", done.describe());
        assert!(done.stderr.contains("--insecure"), "{}", done.describe());
    });
}

#[test]
fn tokens_and_scopes_answer_401_and_403_with_json_and_are_never_echoed() {
    with_fresh_sqlite(|ctx| {
        let deploy_prefix = ctx.key("deploy/");
        let (ci, ci_entry) = new_token(ctx, "ci", &[&format!("lock:{deploy_prefix}")]);
        let (ops, ops_entry) = new_token(ctx, "ops", &["admin:"]);
        assert!(ci.starts_with("bt_") && ci != ops);
        let file = serde_json::json!({ "tokens": [ci_entry, ops_entry] }).to_string();
        assert!(
            !file.contains(&ci) && !file.contains(&ops),
            "the file keeps hashes only"
        );
        std::fs::write(ctx.path("tokens.json"), &file).expect("write the tokens file");
        let tokens = ctx.path("tokens.json");
        let server = serve(ctx, &["--tokens", tokens.to_str().expect("path")]);
        assert!(server.proc.stderr().contains("2 tokens"));
        let prod = format!("/v1/keys/{}/log", segment(&ctx.key("deploy/prod")));
        let build = format!("/v1/keys/{}/log", segment(&ctx.key("build/x")));
        // No token, a wrong one, a malformed header: 401.
        assert_error(&get(server.address, &prod, None), 401, "unauthorized");
        assert_error(
            &get(server.address, &prod, Some("bt_guess")),
            401,
            "unauthorized",
        );
        let basic = request(server.address, "GET", &prod, None, None);
        assert_error(&basic, 401, "unauthorized");
        // ci may read (lock includes read) under deploy/ only: 403 elsewhere.
        assert_eq!(get(server.address, &prod, Some(&ci)).status, 200);
        let denied = get(server.address, &build, Some(&ci));
        assert_error(&denied, 403, "forbidden");
        let message = denied.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("\"ci\""),
            "names the token by its name: {message}"
        );
        assert_eq!(get(server.address, &build, Some(&ops)).status, 200);
        let me = get(server.address, "/v1/whoami", Some(&ci));
        assert_eq!(me.body["name"], "ci");
        assert_eq!(me.body["scopes"][0], format!("lock:{deploy_prefix}"));
        // Health needs no token (a load balancer has none).
        assert_eq!(get(server.address, "/healthz", None).status, 200);
        // No token appears in an answer or the server's output.
        for answer in [&me, &denied] {
            assert!(!answer.raw.contains(&ci) && !answer.raw.contains(&ops));
        }
        let stderr = server.proc.stderr();
        assert!(!stderr.contains(&ci) && !stderr.contains(&ops), "{stderr}");
    });
}

#[test]
fn bad_input_gets_a_json_error_and_no_panic() {
    with_fresh_sqlite(|ctx| {
        let server = serve(ctx, &[]);
        let key = segment(&ctx.key("k"));
        let cases = [
            ("GET", "/v1/keys/%01/log".to_owned(), 400, "bad_request"),
            ("GET", "/v1/keys/%FF%FE/log".to_owned(), 400, "bad_request"),
            ("GET", format!("/v1/keys/{key}/log?n=0"), 400, "bad_request"),
            ("GET", format!("/v1/keys/{key}/log?n=x"), 400, "bad_request"),
            ("GET", format!("/v1/keys/{key}/log?m=1"), 400, "bad_request"),
            (
                "GET",
                format!("/v1/keys/{}/log", "k".repeat(300)),
                400,
                "bad_request",
            ),
            ("GET", "/v1/nope".to_owned(), 404, "not_found"),
            (
                "POST",
                format!("/v1/keys/{key}/log"),
                405,
                "method_not_allowed",
            ),
        ];
        for (method, path, status, code) in cases {
            let answer = request(server.address, method, &path, None, None);
            assert_error(&answer, status, code);
        }
        assert_eq!(
            get(server.address, "/healthz", None).status,
            200,
            "still up"
        );
    });
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    with_fresh_sqlite(|ctx| {
        let mut server = serve(ctx, &[]);
        assert_eq!(get(server.address, "/healthz", None).status, 200);
        common::send_signal(server.proc.pid(), libc::SIGTERM);
        let done = server.proc.wait(PROMPT);
        done.assert_code(0);
        assert!(
            done.stderr.contains("stopped serving"),
            "{}",
            done.describe()
        );
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            std::net::TcpStream::connect(server.address).is_err(),
            "no longer listening"
        );
    });
}
