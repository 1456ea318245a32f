//! `baton serve`, a real server process on loopback: health and readiness, tokens and scopes
//! (401 and 403 with JSON bodies, tokens never echoed or logged), JSON errors for bad input,
//! the refusal to listen beyond loopback without tokens, and a clean stop on SIGTERM.

use baton_testkit as common;

use std::net::SocketAddr;
use std::time::Duration;

use common::http::{get, request};
use common::{with_fresh_sqlite, Ctx, Proc, PROMPT};
use serde_json::Value;

/// A started `baton serve` and the address it listens on.
struct Server {
    proc: Proc,
    address: SocketAddr,
}

/// Starts `baton serve --listen 127.0.0.1:0` with `extra` arguments; waits for its address.
fn serve(ctx: &Ctx, extra: &[&str]) -> Server {
    let (proc, address) = ctx.serve(extra);
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

/// An enqueue of ticket `n` of `key`, as the client library makes it.
fn enqueue(n: u32, context: &str) -> baton_core::Request {
    let op = baton_core::Op::Enqueue(baton_core::Enqueue {
        may_wait_in_backlog: false,
        pool: None,
        ci_run: None,
        id: format!("t-{n:016x}"),
        token: format!("{n:032x}"),
        mode: baton_core::Mode::Normal,
        limit: 1,
        context: context.into(),
        order: None,
        supersede: false,
        keep: false,
        ttl_ms: 60_000,
        waiter_ttl_ms: 60_000,
        claim_ms: 3_000,
        max_live: 1000,
        once: None,
        cancel_running: false,
        override_freeze: None,
    });
    baton_core::Request::new(format!("a{n}"), op)
}

fn release(n: u32, token: &str) -> baton_core::Request {
    let op = baton_core::Op::Release {
        token: token.into(),
        outcome: baton_core::Outcome::Succeeded,
        reason: None,
    };
    baton_core::Request::new(format!("r{n}"), op)
}

fn post(
    server: &Server,
    path: &str,
    token: Option<&str>,
    body: &impl serde::Serialize,
) -> common::http::Answer {
    let body = serde_json::to_vec(body).expect("encode");
    request(server.address, "POST", path, token, Some(&body))
}

#[test]
fn operations_and_store_reads_through_the_server_act_as_direct_ones() {
    with_fresh_sqlite(|ctx| {
        let server = serve(ctx, &[]);
        let key = ctx.key("deploy/prod");
        let ops = format!("/v1/keys/{}/ops", segment(&key));
        // An enqueue on a free key is granted, with a fence.
        let granted = post(&server, &ops, None, &enqueue(1, "through http"));
        assert_eq!(granted.status, 200, "{granted:?}");
        let live = &granted.body["reply"]["Ticket"]["Live"];
        assert_eq!(live["state"], "held", "{granted:?}");
        let fence = live["fence"].as_u64().expect("a fence");
        assert!(fence > 0);
        assert!(
            granted.body["started_before_ms"].is_u64(),
            "a deadline may be derived"
        );
        assert_eq!(granted.body["granted"][0][1], fence);
        // The same attempt again (a lost answer, retried) is recognised: one ticket.
        let again = post(&server, &ops, None, &enqueue(1, "through http"));
        assert_eq!(again.body["reply"], granted.body["reply"], "{again:?}");
        let holders = ctx.key_view(&key).holders();
        assert_eq!(holders.len(), 1);
        assert_eq!(holders[0].context, "through http");
        // A second ticket queues behind it.
        let queued = post(&server, &ops, None, &enqueue(2, "second"));
        assert_eq!(queued.body["reply"]["Ticket"]["Live"]["state"], "queued");
        // A wrong token is the core's refusal, as a 409 with the refusal itself.
        let wrong = post(
            &server,
            &ops,
            None,
            &release(9, "0123456789abcdef0123456789abcdef"),
        );
        assert_error(&wrong, 409, "refused");
        assert_eq!(
            wrong.body["error"]["refusal"]["kind"], "unknown_token",
            "{wrong:?}"
        );
        // Bad input is a 400 that changes nothing.
        let bad = post(&server, &ops, None, &release(9, ""));
        assert_error(&bad, 400, "refused");
        // The holder releases; the next is granted, with a higher fence.
        let released = post(&server, &ops, None, &release(1, &format!("{:032x}", 1)));
        assert_eq!(released.status, 200, "{released:?}");
        let next = &released.body["document"]["tickets"][0];
        assert_eq!(next["state"], "held", "{released:?}");
        assert!(next["fence"].as_u64().expect("fence") > fence);
        let log = ctx.baton(["log", &key, "--json"]).run();
        log.assert_code(0);
        assert!(log.stdout.contains("through http") && log.stdout.contains("succeeded"));
        // The store-level reads a client makes through the server.
        let document = get(
            server.address,
            &format!("/v1/keys/{}/document", segment(&key)),
            None,
        );
        let bytes = document.body["bytes"]
            .as_str()
            .expect("the document's bytes");
        let doc = baton_core::decode(bytes.as_bytes()).expect("a document the core reads");
        assert_eq!(doc.tickets.len(), 1);
        assert!(document.body["version"].is_string());
        assert!(
            !bytes.contains(&format!("{:032x}", 2)),
            "tokens are kept as hashes"
        );
        let tail = get(
            server.address,
            &format!("/v1/keys/{}/history?tail=5", segment(&key)),
            None,
        );
        assert_eq!(
            tail.body["records"].as_array().map(Vec::len),
            Some(1),
            "{tail:?}"
        );
        let after = format!("/v1/keys/{}/history?after=1&limit=5", segment(&key));
        assert_eq!(
            get(server.address, &after, None).body["records"],
            Value::Array(vec![])
        );
        let listed = get(
            server.address,
            &format!("/v1/keys?prefix={}", ctx.prefix),
            None,
        );
        assert_eq!(listed.body["keys"], serde_json::json!([key]));
        let clock = get(server.address, "/v1/clock", None);
        assert_eq!(clock.body["kind"], "time", "SQLite has a clock: {clock:?}");
        let none = get(
            server.address,
            &format!("/v1/keys/{}/document", segment(&ctx.key("none"))),
            None,
        );
        assert_eq!(none.body["bytes"], Value::Null);
    });
}

#[test]
fn each_operation_needs_its_scope() {
    with_fresh_sqlite(|ctx| {
        let prefix = ctx.key("");
        let (reader, reader_entry) = new_token(ctx, "reader", &[&format!("read:{prefix}")]);
        let (ci, ci_entry) = new_token(ctx, "ci", &[&format!("lock:{prefix}")]);
        let (ops, ops_entry) = new_token(ctx, "ops", &[&format!("admin:{prefix}")]);
        let file = serde_json::json!({ "tokens": [reader_entry, ci_entry, ops_entry] });
        std::fs::write(ctx.path("tokens.json"), file.to_string()).expect("write");
        let tokens = ctx.path("tokens.json");
        let server = serve(ctx, &["--tokens", tokens.to_str().expect("path")]);
        let key = ctx.key("k");
        let path = format!("/v1/keys/{}/ops", segment(&key));
        assert_error(
            &post(&server, &path, Some(&reader), &enqueue(1, "r")),
            403,
            "forbidden",
        );
        assert_eq!(
            post(&server, &path, Some(&ci), &enqueue(1, "ci")).status,
            200
        );
        let cancel = baton_core::Request::new(
            "c1".to_owned(),
            baton_core::Op::Cancel {
                reason: None,
                id: format!("t-{:016x}", 1),
                by: "ops".into(),
            },
        );
        assert_error(&post(&server, &path, Some(&ci), &cancel), 403, "forbidden");
        let forced = post(&server, &path, Some(&ops), &cancel);
        assert_eq!(forced.status, 200, "{forced:?}");
        // Another prefix is out of every token's reach.
        let elsewhere = format!("/v1/keys/{}/ops", segment("elsewhere/k"));
        assert_error(
            &post(&server, &elsewhere, Some(&ops), &enqueue(3, "x")),
            403,
            "forbidden",
        );
        // A reader lists only what it may read, and reads documents.
        let document = format!("/v1/keys/{}/document", segment(&key));
        assert_eq!(get(server.address, &document, Some(&reader)).status, 200);
        // The notification rules' document (its name starts with the control character 1).
        let notify = "/v1/keys/%01notify/document";
        assert_error(
            &get(server.address, notify, Some(&reader)),
            403,
            "forbidden",
        );
        // Admin on a prefix is not enough: the rules (webhook URLs are secrets) are the
        // whole store's.
        assert_error(&get(server.address, notify, Some(&ops)), 403, "forbidden");
        let rules = serde_json::json!({ "expected": null, "bytes": "{\"rules\":[]}" });
        assert_error(
            &post(&server, "/v1/settings/notify", Some(&ops), &rules),
            403,
            "forbidden",
        );
        // Shared values: lock sets, admin deletes.
        let value = format!("/v1/values/{}", segment(&ctx.key("v")));
        let set = |id: &str| {
            serde_json::json!({ "id": id, "value": "1", "json": false, "condition": "any",
                "ttl_ms": null, "fence": null, "context": "t" })
        };
        assert_error(
            &post(&server, &value, Some(&reader), &set("w1")),
            403,
            "forbidden",
        );
        let written = post(&server, &value, Some(&ci), &set("w1"));
        assert_eq!(written.body["version"], 1, "{written:?}");
        // The same write again (its answer lost) is recognised, not written twice.
        let again = post(&server, &value, Some(&ci), &set("w1"));
        assert_eq!(again.body["version"], 1, "{again:?}");
        let mut del = set("w2");
        del["value"] = Value::Null;
        assert_error(&post(&server, &value, Some(&ci), &del), 403, "forbidden");
        assert_eq!(post(&server, &value, Some(&ops), &del).status, 200);
        // Records: a job's, with lock; never a backlog segment, which the server writes.
        let record = |name: &str| format!("/v1/keys/{}/records/{}", segment(&key), segment(name));
        let bytes = serde_json::json!({ "bytes": "{}" });
        let put = |name: &str, token: &str| {
            let body = bytes.to_string();
            request(
                server.address,
                "PUT",
                &record(name),
                Some(token),
                Some(body.as_bytes()),
            )
        };
        assert_error(&put("job/j-1", &reader), 403, "forbidden");
        assert_eq!(put("job/j-1", &ci).status, 200);
        assert_error(&put("backlog/1/1", &ops), 400, "bad_request");
    });
}

#[test]
fn malformed_operations_get_a_json_error_and_change_nothing() {
    with_fresh_sqlite(|ctx| {
        let server = serve(ctx, &[]);
        let key = ctx.key("k");
        let path = format!("/v1/keys/{}/ops", segment(&key));
        let send = |body: &[u8]| request(server.address, "POST", &path, None, Some(body));
        assert_error(&send(b"{"), 400, "bad_request");
        assert_error(&send(b"[]"), 400, "bad_request");
        assert_error(
            &send(br#"{"attempt":"a","op":{"op":"launch"}}"#),
            400,
            "bad_request",
        );
        assert_error(
            &send(br#"{"attempt":"a","op":{"op":"tick"},"extra":1}"#),
            400,
            "bad_request",
        );
        assert_error(
            &send(br#"{"attempt":7,"op":{"op":"tick"}}"#),
            400,
            "bad_request",
        );
        // Unknown fields anywhere (found by the schema-driven fuzz run): an operation without
        // fields, a job's spec, a value's write.
        assert_error(
            &send(br#"{"attempt":"a","op":{"op":"tick","x":42}}"#),
            400,
            "bad_request",
        );
        let submit = serde_json::json!({ "attempt": "a", "op": {
            "op": "submit", "id": "j-1", "limit": 1, "context": "", "order": null,
            "supersede": false, "keep": false, "max_live": 100,
            "spec": { "max_attempts": 1, "backoff_ms": 1000, "x": 1 } } });
        assert_error(&send(submit.to_string().as_bytes()), 400, "bad_request");
        let value = format!("/v1/values/{}", segment(&ctx.key("v")));
        let write = br#"{"id":"w","value":"1","json":false,"condition":"any","ttl_ms":null,
            "fence":null,"context":"","extra":true}"#;
        let answer = request(server.address, "POST", &value, None, Some(write));
        assert_error(&answer, 400, "bad_request");
        let mut oversize = br#"{"attempt":"a","op":{"op":"tick"},"pad":""#.to_vec();
        oversize.extend(std::iter::repeat_n(b'x', 600 * 1024));
        oversize.extend(b"\"}");
        assert_error(&send(&oversize), 413, "too_large");
        assert!(ctx.key_status(&key).is_none(), "nothing was written");
        assert_eq!(get(server.address, "/healthz", None).status, 200);
    });
}

#[test]
fn status_and_log_read_through_the_server_with_a_token() {
    with_fresh_sqlite(|ctx| {
        let key = ctx.key("deploy/prod");
        ctx.baton(["run", &key, "--context", "direct run", "--", "true"])
            .run()
            .assert_code(0);
        let holder = ctx
            .baton(["run", &key, "--context", "holding", "--", "sleep", "30"])
            .name("holder")
            .spawn();
        ctx.wait_holding(&key, "holding");
        let (reader, entry) = new_token(ctx, "reader", &[&format!("read:{}", ctx.prefix)]);
        let file = serde_json::json!({ "tokens": [entry] }).to_string();
        std::fs::write(ctx.path("tokens.json"), file).expect("write");
        let tokens = ctx.path("tokens.json");
        let server = serve(ctx, &["--tokens", tokens.to_str().expect("path")]);
        let url = format!("http://{}", server.address);
        let through = |args: &[&str]| {
            ctx.baton(args)
                .env("BATON_STORE", &url)
                .env("BATON_TOKEN", &reader)
                .run()
        };
        // status and log through the server say what they say directly.
        let status = through(&["status", &key, "--json"]);
        status.assert_code(0);
        assert!(status.stdout.contains("holding"), "{}", status.describe());
        let log = through(&["log", &key]);
        log.assert_code(0);
        assert!(log.stdout.contains("direct run"), "{}", log.describe());
        // A second server address that refuses connections is passed over.
        let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let dead_address = dead.local_addr().expect("address");
        drop(dead);
        let both = format!("http://{dead_address},{}", server.address);
        let via_second = ctx
            .baton(["status", &key, "--json"])
            .env("BATON_STORE", &both)
            .env("BATON_TOKEN", &reader)
            .run();
        via_second.assert_code(0);
        // Without a token: refused, saying what to do.
        let anonymous = ctx.baton(["status", &key]).env("BATON_STORE", &url).run();
        anonymous.assert_refused(&[1, 2, 3]);
        assert!(
            anonymous.stderr.contains("BATON_TOKEN"),
            "{}",
            anonymous.describe()
        );
        // A write with a read token is refused (403), saying what to do.
        let write = ctx
            .baton(["run", &key, "--timeout", "0", "--", "true"])
            .env("BATON_STORE", &url)
            .env("BATON_TOKEN", &reader)
            .run();
        write.assert_refused(&[1, 2, 3]);
        assert!(
            write.stderr.contains("scope") && write.stderr.contains("BATON_TOKEN"),
            "{}",
            write.describe()
        );
        assert_eq!(ctx.key_view(&key).queue().len(), 0, "nothing was queued");
        drop(holder);
    });
}

/// A holder through `holder_url` and a waiter through `waiter_url`: the waiter refreshes only
/// every 200 s (`--waiter-ttl 10m`) and would read by timer hourly (`--poll 1h..1h`; through a
/// server, never), so only a push can hand it its turn within the test's bound.
fn holder_and_pushed_waiter(
    ctx: &Ctx,
    key: &str,
    holder_url: &str,
    waiter_url: &str,
) -> (String, Proc) {
    let held = ctx
        .baton(["acquire", key, "--ttl", "15m", "--context", "holder"])
        .env("BATON_STORE", holder_url)
        .run();
    held.assert_code(0);
    let waiter = ctx
        .baton([
            "acquire",
            key,
            "--waiter-ttl",
            "10m",
            "--poll",
            "1h..1h",
            "--context",
            "waiter",
            "--json",
        ])
        .env("BATON_STORE", waiter_url)
        .name("waiter")
        .spawn();
    ctx.wait_queued(key, "waiter");
    (held.stdout.trim().to_owned(), waiter)
}

/// Two servers on one store, on SQLite and (when the test scripts started it) PostgreSQL.
#[test]
fn a_release_through_one_server_is_pushed_to_a_waiter_on_another() {
    with_fresh_sqlite(release_pushed_across_servers);
    if let Ok(url) = std::env::var("BATON_TEST_POSTGRES_URL") {
        common::with_store(&url, release_pushed_across_servers);
    }
}

fn release_pushed_across_servers(ctx: &Ctx) {
    let a = serve(ctx, &["--poll", "1h"]);
    let b = serve(ctx, &["--poll", "1h"]);
    let (url_a, url_b) = (
        format!("http://{}", a.address),
        format!("http://{}", b.address),
    );
    for (name, holder_url) in [("same", &url_a), ("other", &url_b)] {
        let key = ctx.key(name);
        let (token, mut waiter) = holder_and_pushed_waiter(ctx, &key, holder_url, &url_a);
        ctx.baton(["release", &key, &token])
            .env("BATON_STORE", holder_url)
            .run()
            .assert_code(0);
        let done = waiter.wait(PROMPT);
        done.assert_code(0);
        let turn: Value = serde_json::from_str(done.stdout.trim()).expect("acquire --json");
        let fence = turn["fence"].as_u64().expect("a fence");
        assert_eq!(ctx.key_view(&key).fence(), Some(fence), "{name}");
    }
}

#[test]
fn sigterm_hands_waits_to_the_next_server() {
    with_fresh_sqlite(|ctx| {
        let mut a = serve(ctx, &[]);
        let b = serve(ctx, &[]);
        let both = format!("http://{},{}", a.address, b.address);
        let key = ctx.key("handed");
        let (token, mut waiter) = holder_and_pushed_waiter(ctx, &key, &both, &both);
        // The first server stops with a waiter following its feed: it ends the feed, and
        // stops (a feed left open would keep it from finishing).
        common::send_signal(a.proc.pid(), libc::SIGTERM);
        a.proc.wait(PROMPT).assert_code(0);
        ctx.baton(["release", &key, &token])
            .env("BATON_STORE", &both)
            .run()
            .assert_code(0);
        waiter.wait(PROMPT).assert_code(0);
        assert_eq!(ctx.key_view(&key).holder_contexts(), ["waiter"]);
        drop(b);
    });
}

/// `release` and `renew` take the ticket's token as an argument, beside the server's token in
/// `BATON_TOKEN`: the two never mix (the ticket's token is never sent as the server's).
#[test]
fn ticket_tokens_and_the_server_token_stay_apart() {
    with_fresh_sqlite(|ctx| {
        let (ci, entry) = new_token(ctx, "ci", &[&format!("lock:{}", ctx.prefix)]);
        let file = serde_json::json!({ "tokens": [entry] }).to_string();
        std::fs::write(ctx.path("tokens.json"), file).expect("write");
        let tokens = ctx.path("tokens.json");
        let server = serve(ctx, &["--tokens", tokens.to_str().expect("path")]);
        let url = format!("http://{}", server.address);
        let key = ctx.key("apart");
        let through = |args: &[&str]| {
            ctx.baton(args)
                .env("BATON_STORE", &url)
                .env("BATON_TOKEN", &ci)
                .run()
        };
        let acquired = through(&["acquire", &key, "--ttl", "10m"]);
        acquired.assert_code(0);
        let ticket = acquired.stdout.trim();
        through(&["renew", &key, ticket]).assert_code(0);
        through(&["release", &key, ticket]).assert_code(0);
        assert_eq!(
            ctx.key_view(&key).last_outcome().as_deref(),
            Some("succeeded")
        );
        // And with --token instead of the variable.
        let acquired = ctx
            .baton(["acquire", &key, "--token", &ci])
            .env("BATON_STORE", &url)
            .run();
        acquired.assert_code(0);
        ctx.baton(["release", &key, acquired.stdout.trim(), "--token", &ci])
            .env("BATON_STORE", &url)
            .run()
            .assert_code(0);
    });
}

/// The value of the series `series` (name and labels, exactly as printed) in a scrape.
fn metric(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn metrics_exist_at_zero_and_count_what_the_server_did() {
    with_fresh_sqlite(|ctx| {
        let server = serve(ctx, &[]);
        let url = format!("http://{}", server.address);
        let scrape = || {
            let answer = get(server.address, "/metrics", None);
            assert_eq!(answer.status, 200);
            assert!(answer.headers.contains("text/plain"), "{}", answer.headers);
            answer.raw
        };
        let before = scrape();
        for series in [
            r#"baton_operations_total{op="enqueue",outcome="ok"}"#,
            r#"baton_operations_total{op="cancel",outcome="refused"}"#,
            r#"baton_operations_total{op="kv_delete",outcome="error"}"#,
            "baton_wait_seconds_count",
            "baton_hold_seconds_count",
            "baton_lease_expirations_total",
            "baton_cas_conflicts_total",
            r#"baton_store_request_seconds_count{call="cas"}"#,
            r#"baton_notifications_total{outcome="delivered"}"#,
            "baton_watchers",
        ] {
            assert_eq!(
                metric(&before, series),
                Some(0.0),
                "{series} at zero:\n{before}"
            );
        }
        // A holder whose lease runs out (it never renews), and a waiter that takes over.
        let key = ctx.key("metered");
        let through = |args: &[&str]| ctx.baton(args).env("BATON_STORE", &url);
        through(&["acquire", &key, "--ttl", "1s"])
            .run()
            .assert_code(0);
        let mut waiter = through(&["run", &key, "--context", "waiter", "--", "true"])
            .name("waiter")
            .spawn();
        ctx.wait_queued(&key, "waiter");
        let prefix = ctx.prefix.clone();
        let queued = format!("baton_queue_length{{prefix=\"{prefix}\"}}");
        common::wait_until("the queue gauge", PROMPT, || {
            metric(&scrape(), &queued) == Some(1.0)
        });
        waiter.wait(PROMPT).assert_code(0);
        let after = scrape();
        let at_least = |series: &str, n: f64| {
            let value = metric(&after, series).unwrap_or(-1.0);
            assert!(
                value >= n,
                "{series} is {value}, expected at least {n}:\n{after}"
            );
        };
        at_least(r#"baton_operations_total{op="enqueue",outcome="ok"}"#, 2.0);
        at_least(r#"baton_operations_total{op="release",outcome="ok"}"#, 1.0);
        at_least("baton_wait_seconds_count", 1.0);
        at_least("baton_hold_seconds_count", 2.0);
        at_least("baton_lease_expirations_total", 1.0);
        at_least(r#"baton_store_request_seconds_count{call="cas"}"#, 3.0);
        assert_eq!(
            metric(&after, &queued),
            None,
            "an empty queue leaves no series"
        );
        // The process and the store.
        assert_eq!(get(server.address, "/healthz", None).status, 200);
        assert_eq!(get(server.address, "/readyz", None).status, 200);
    });
}

/// Makes a CA and a certificate for 127.0.0.1 signed by it, with `openssl`: (ca, cert, key).
fn certificates(ctx: &Ctx) -> (String, String, String) {
    let path = |name: &str| ctx.path(name).to_str().expect("a path").to_owned();
    let (ca_key, ca, key, csr, cert, ext) = (
        path("ca.key"),
        path("ca.pem"),
        path("server.key"),
        path("server.csr"),
        path("server.pem"),
        path("server.ext"),
    );
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1\n").expect("write");
    let openssl = |args: &[&str]| {
        let output = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("run openssl");
        assert!(output.status.success(), "openssl {args:?}: {output:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &ca_key,
        "-out",
        &ca,
        "-days",
        "2",
        "-subj",
        "/CN=baton test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &key,
        "-out",
        &csr,
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        &cert,
        "-days",
        "2",
        "-extfile",
        &ext,
    ]);
    (ca, cert, key)
}

#[test]
fn tls_with_a_certificate_and_key() {
    with_fresh_sqlite(|ctx| {
        let (ca, cert, key) = certificates(ctx);
        let server = serve(ctx, &["--tls-cert", &cert, "--tls-key", &key]);
        let url = format!("https://{}", server.address);
        let name = ctx.key("over-tls");
        let through = |args: &[&str]| {
            ctx.baton(args)
                .env("BATON_STORE", &url)
                .env("SSL_CERT_FILE", &ca)
                .run()
        };
        let acquired = through(&["acquire", &name]);
        acquired.assert_code(0);
        through(&["release", &name, acquired.stdout.trim()]).assert_code(0);
        assert_eq!(
            ctx.key_view(&name).last_outcome().as_deref(),
            Some("succeeded")
        );
        // A client that does not trust the certificate is refused, and says why.
        let untrusted = ctx
            .baton(["status", &name])
            .env("BATON_STORE", &url)
            .env("SSL_CERT_FILE", &cert)
            .run();
        untrusted.assert_refused(&[1]);
        assert!(
            untrusted.stderr.to_lowercase().contains("certificate"),
            "{}",
            untrusted.describe()
        );
        // Plain HTTP to the TLS port gets no answer a client could take for one.
        let plain = std::panic::catch_unwind(|| get(server.address, "/healthz", None));
        assert!(
            plain.map(|answer| answer.status != 200).unwrap_or(true),
            "no plain-text answer"
        );
    });
}

#[test]
fn pausing_needs_admin_on_the_target_and_so_does_an_override() {
    with_fresh_sqlite(|ctx| {
        let prefix = ctx.key("");
        let (reader, reader_entry) = new_token(ctx, "reader", &[&format!("read:{prefix}")]);
        let (ci, ci_entry) = new_token(ctx, "ci", &[&format!("lock:{prefix}")]);
        let (ops, ops_entry) = new_token(ctx, "ops", &[&format!("admin:{prefix}")]);
        let file = serde_json::json!({ "tokens": [reader_entry, ci_entry, ops_entry] });
        std::fs::write(ctx.path("tokens.json"), file.to_string()).expect("write");
        let tokens = ctx.path("tokens.json");
        let server = serve(ctx, &["--tokens", tokens.to_str().expect("path")]);
        let url = format!("http://{}", server.address);
        let key = ctx.key("deploy");
        let as_token = |token: &str, args: &[&str]| {
            ctx.baton(args)
                .env("BATON_STORE", &url)
                .env("BATON_TOKEN", token)
                .run_within(PROMPT)
        };
        let pause_args = ["pause", key.as_str(), "--reason", "audit"];
        let refused = as_token(&ci, &pause_args);
        refused.assert_refused(&[1]);
        assert!(refused.stderr.contains("admin"), "{}", refused.describe());
        // Admin on the prefix pauses keys under it, not every key.
        as_token(&ops, &["pause", "*", "--reason", "audit"]).assert_refused(&[1]);
        as_token(&ops, &pause_args).assert_code(0);
        // Anyone who may read the key sees the freeze; nobody outside its prefix does.
        let list = as_token(&reader, &["pause", "--list", "--json"]);
        list.assert_code(0);
        assert!(list.stdout.contains("audit"), "{}", list.describe());
        let freezes = get(server.address, "/v1/freezes", Some(&reader));
        assert_eq!(freezes.status, 200, "{freezes:?}");
        assert_eq!(freezes.body["freezes"][0]["target"], key.as_str());
        // Getting through a freeze is an operator's act too.
        let mut through = enqueue(7, "hotfix");
        if let baton_core::Op::Enqueue(e) = &mut through.op {
            e.override_freeze = Some("INC-42".into());
        }
        let path = format!("/v1/keys/{}/ops", segment(&key));
        assert_error(&post(&server, &path, Some(&ci), &through), 403, "forbidden");
        let granted = post(&server, &path, Some(&ops), &through);
        assert_eq!(granted.status, 200, "{granted:?}");
        assert_eq!(
            granted.body["granted"][0][0], "t-0000000000000007",
            "{granted:?}"
        );
        as_token(&ci, &["resume", &key]).assert_refused(&[1]);
        as_token(&ops, &["resume", &key]).assert_code(0);
    });
}
